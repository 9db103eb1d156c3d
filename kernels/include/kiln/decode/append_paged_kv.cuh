// append_paged_kv: writes new tokens' keys and values into their slots of the paged KV cache
// (layout in kiln/decode/decode_contract.h). For token i of request b = batch_indices[i] at
// position pos = positions[i] of that request's KV sequence:
//
//   page = kv_indices[kv_indptr[b] + pos / page_size],   slot = pos % page_size
//   k_cache[page, slot, h, :] = k[i, h, :];   v_cache[page, slot, h, :] = v[i, h, :]
//
// A pure copy (bits in, bits out). Tokens the page table does not cover (b outside the
// batch, pos < 0 or past the request's KV length, a page-table offset outside kv_indices, a
// page id outside the cache) are not written. One thread per kVec-element vector of one
// (token, head); a grid-stride loop.
// Every pointer, token/head stride and page stride is a multiple of kVec elements.
#pragma once

#include "kiln/common/numeric.cuh"
#include "kiln/common/vec.cuh"
#include "kiln/decode/decode_contract.h"

namespace kiln {
namespace decode {

template <typename T_, int kHeadDim_, int kVec_, int kBlock_>
struct AppendShape {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kVec = kVec_;
  static constexpr int kBlock = kBlock_;
  static constexpr int kVecsPerHead = kHeadDim / kVec;
  static_assert(sizeof(T) == 2, "the paged KV cache holds fp16 or bf16");
  static_assert(kVec >= 1 && (kVec & (kVec - 1)) == 0 && kVec * sizeof(T) <= 16,
                "vec is a power of two of at most 16 bytes");
  static_assert(kHeadDim % kVec == 0, "vec must divide head_dim");
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "the block is whole warps");
};

template <class Shape>
__device__ __forceinline__ void AppendPagedKv(const KilnAppendPagedKvParams& p) {
  using T = typename Shape::T;
  constexpr int kVec = Shape::kVec;
  const long long heads = p.num_kv_heads;
  const long long total = p.nnz * heads * Shape::kVecsPerHead;
  const long long step = static_cast<long long>(gridDim.x) * Shape::kBlock;
  for (long long index = static_cast<long long>(blockIdx.x) * Shape::kBlock + threadIdx.x; index < total;
       index += step) {
    const int vec = static_cast<int>(index % Shape::kVecsPerHead);
    const long long token_head = index / Shape::kVecsPerHead;
    const int head = static_cast<int>(token_head % heads);
    const long long token = token_head / heads;
    const int b = p.batch_indices[token];
    const int pos = p.positions[token];
    if (b < 0 || b >= p.batch || pos < 0) continue;
    const int page_begin = p.kv_indptr[b];
    const int pages = p.kv_indptr[b + 1] - page_begin;
    const int last_page_len = min(max(p.kv_last_page_len[b], 0), p.page_size);
    const int kv_len = pages > 0 ? (pages - 1) * p.page_size + last_page_len : 0;
    const long long entry = static_cast<long long>(page_begin) + pos / p.page_size;
    if (pos >= kv_len || page_begin < 0 || entry >= p.num_indices) continue;
    const int page = p.kv_indices[entry];
    if (page < 0 || page >= p.num_pages) continue;
    const long long in_page = (static_cast<long long>(pos % p.page_size) * heads + head) * Shape::kHeadDim + vec * kVec;
    const T* k = static_cast<const T*>(p.k) + token * p.k_stride_token + head * p.k_stride_head + vec * kVec;
    const T* v = static_cast<const T*>(p.v) + token * p.v_stride_token + head * p.v_stride_head + vec * kVec;
    StoreVec<kVec>(static_cast<T*>(p.k_cache) + page * p.k_page_stride + in_page, LoadVec<kVec>(k));
    StoreVec<kVec>(static_cast<T*>(p.v_cache) + page * p.v_page_stride + in_page, LoadVec<kVec>(v));
  }
}

}  // namespace decode
}  // namespace kiln
