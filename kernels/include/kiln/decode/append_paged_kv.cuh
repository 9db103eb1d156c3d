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

namespace detail {

// kBytes (2, 4, 8 or 16) of global memory as one access through the read-only path (k and v are
// never written by the kernel, and the client checks they do not overlap the caches). With the
// stores predicated instead of branched over, nothing moves these loads after the page-table
// walk: a thread's key and value are in flight while it walks (SASS checked, sm_90a).
template <int kBytes>
struct Bits {
  unsigned w[kBytes >= 4 ? kBytes / 4 : 1];
};

template <int kBytes>
__device__ __forceinline__ Bits<kBytes> LoadBitsNow(const void* p) {
  Bits<kBytes> b;
  if constexpr (kBytes == 16) {
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(b.w[0]), "=r"(b.w[1]), "=r"(b.w[2]), "=r"(b.w[3])
                 : "l"(p));
  } else if constexpr (kBytes == 8) {
    asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(b.w[0]), "=r"(b.w[1]) : "l"(p));
  } else if constexpr (kBytes == 4) {
    asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(b.w[0]) : "l"(p));
  } else {
    static_assert(kBytes == 2, "2, 4, 8 or 16 bytes");
    unsigned short h;
    asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(h) : "l"(p));
    b.w[0] = h;
  }
  return b;
}

// One store of the kBytes as one access, made only when `when` (a predicated store, not a
// branch: behind a branch ptxas sank the key and value loads to the store, after the walk; and
// a Vec of bf16 or a uint4 stored from C++ became four 4-byte stores in the PTX).
template <int kBytes>
__device__ __forceinline__ void StoreBitsIf(bool when, void* p, const Bits<kBytes>& b) {
  const int w = when;
  if constexpr (kBytes == 16) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %0, 0;\n"
                 "  @p st.global.v4.u32 [%1], {%2, %3, %4, %5}; }" ::"r"(w),
                 "l"(p), "r"(b.w[0]), "r"(b.w[1]), "r"(b.w[2]), "r"(b.w[3])
                 : "memory");
  } else if constexpr (kBytes == 8) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %0, 0;\n"
                 "  @p st.global.v2.u32 [%1], {%2, %3}; }" ::"r"(w),
                 "l"(p), "r"(b.w[0]), "r"(b.w[1])
                 : "memory");
  } else if constexpr (kBytes == 4) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %0, 0;\n"
                 "  @p st.global.u32 [%1], %2; }" ::"r"(w),
                 "l"(p), "r"(b.w[0])
                 : "memory");
  } else {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %0, 0;\n"
                 "  @p st.global.u16 [%1], %2; }" ::"r"(w),
                 "l"(p), "h"(static_cast<unsigned short>(b.w[0]))
                 : "memory");
  }
}

}  // namespace detail

template <class Shape>
__device__ __forceinline__ void AppendPagedKv(const KilnAppendPagedKvParams& p) {
  using T = typename Shape::T;
  constexpr int kVec = Shape::kVec;
  // No request, or no page-table entry: nothing is covered (and the walk below clamps into both).
  if (p.batch < 1 || p.num_indices < 1) return;
  const long long heads = p.num_kv_heads;
  const long long total = p.nnz * heads * Shape::kVecsPerHead;
  const long long step = static_cast<long long>(gridDim.x) * Shape::kBlock;
  for (long long index = static_cast<long long>(blockIdx.x) * Shape::kBlock + threadIdx.x; index < total;
       index += step) {
    const int vec = static_cast<int>(index % Shape::kVecsPerHead);
    const long long token_head = index / Shape::kVecsPerHead;
    const int head = static_cast<int>(token_head % heads);
    const long long token = token_head / heads;
    // The new key and value are loaded first, whether or not they are written: they are always
    // in bounds, and their round trip then overlaps the page-table chain (batch_indices ->
    // kv_indptr -> kv_indices) instead of following it.
    const T* k = static_cast<const T*>(p.k) + token * p.k_stride_token + head * p.k_stride_head + vec * kVec;
    const T* v = static_cast<const T*>(p.v) + token * p.v_stride_token + head * p.v_stride_head + vec * kVec;
    constexpr int kBytes = kVec * static_cast<int>(sizeof(T));
    const detail::Bits<kBytes> k_value = detail::LoadBitsNow<kBytes>(k);
    const detail::Bits<kBytes> v_value = detail::LoadBitsNow<kBytes>(v);
    // The page-table walk with every index clamped into its array, so that no load waits on a
    // branch; what the table does not cover is dropped at the (predicated) store.
    const int b = p.batch_indices[token];
    const int pos = p.positions[token];
    const int bb = min(max(b, 0), p.batch - 1);
    const int page_begin = p.kv_indptr[bb];
    const int pages = p.kv_indptr[bb + 1] - page_begin;
    const int last_page_len = min(max(p.kv_last_page_len[bb], 0), p.page_size);
    const int kv_len = pages > 0 ? (pages - 1) * p.page_size + last_page_len : 0;
    const long long entry = static_cast<long long>(page_begin) + max(pos, 0) / p.page_size;
    const int page = p.kv_indices[min(max(entry, 0ll), p.num_indices - 1)];
    const bool covered = b >= 0 && b < p.batch && pos >= 0 && pos < kv_len && page_begin >= 0 &&
                         entry < p.num_indices && page >= 0 && page < p.num_pages;
    const long long in_page = (static_cast<long long>(pos % p.page_size) * heads + head) * Shape::kHeadDim + vec * kVec;
    detail::StoreBitsIf<kBytes>(covered, static_cast<T*>(p.k_cache) + page * p.k_page_stride + in_page, k_value);
    detail::StoreBitsIf<kBytes>(covered, static_cast<T*>(p.v_cache) + page * p.v_page_stride + in_page, v_value);
  }
}

}  // namespace decode
}  // namespace kiln
