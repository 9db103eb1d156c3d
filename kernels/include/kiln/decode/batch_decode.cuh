// batch_decode: attention of one query token per request over its paged KV cache
// (kiln/decode/decode_contract.h has the layout and the parameters). For request b and query
// head h = kv_head * kGroup + g, over the positions j of its (windowed) KV:
//
//   s_j = sm_scale * q[b, h] . k_j                         soft cap off
//   s_j = cap * tanh(sm_scale * q[b, h] . k_j / cap)       soft cap on
//   out[b, h] = sum_j softmax(s)_j v_j,   lse[b, h] = ln(sum_j exp(s_j))
//
// One block of kWarps warps takes one work item (a request, or a chunk of one) and one kv
// head, and all kGroup query heads of that kv head at once, so every KV byte is read once.
// Per tile of 16 * kWarps tokens (16 per warp), with warp-level tensor-core MMAs (m16n8k16):
//   S^T[16 tokens x 8 heads] = K[16 x D] Q^T[D x 8]      (Q^T in registers for the whole loop;
//                                                         heads >= kGroup are zero columns)
//   online softmax per head in fp32, in log2 units (logits pre-multiplied by log2 e)
//   O^T[D x 8 heads] += V^T[D x 16] P^T[16 x 8]          (P^T: the S^T accumulators rounded to
//                                                         T and transposed with movmatrix)
// K and V tiles stream through a kStages-deep cp.async pipeline in shared memory (16-byte
// copies, XOR-swizzled 16-byte chunks so ldmatrix is free of bank conflicts); one page-table
// lookup per token row (one per tile when a page holds whole tiles), issued a tile ahead. Out-of-range tokens are
// zero-filled and masked, so no byte outside a request's positions is read. At the end the
// warps' (max, sum, O) are merged through shared memory; a request that is one item writes
// `out` (and `lse`), a chunk of a split request writes its normalized partial output and
// log2-sum-exp to the workspace for kiln/decode/merge_states.cuh.
//
// Alignment (the client checks it): the caches and their page strides at 16 bytes, q and out
// (pointers and strides) at 4 bytes.
#pragma once

#include "kiln/common/numeric.cuh"
#include "kiln/decode/attention_math.cuh"
#include "kiln/decode/decode_contract.h"
#include "kiln/decode/warp_mma.cuh"

namespace kiln {
namespace decode {

// Pages smaller than this have their ids looked up a tile ahead (DecodeShape::kLookAhead).
// Measured on the H200 (bench/results/2026-12-04-decode-page-lookahead-h200.md).
constexpr int kLookAheadBelowPage = 16;

template <typename T_, int kHeadDim_, int kGroup_, int kPageSize_, bool kSoftCap_, int kWarps_, int kStages_>
struct DecodeShape {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kGroup = kGroup_;
  static constexpr int kPageSize = kPageSize_;
  static constexpr bool kSoftCap = kSoftCap_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;

  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpTokens = 16;                    // the M of one mma: tokens per warp
  static constexpr int kTileTokens = kWarps * kWarpTokens;  // tokens per pipeline stage
  static constexpr int kChunksPerRow = kHeadDim * 2 / 16;   // 16-byte chunks of a token's row
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = kTileTokens / kRowsPerPass;     // cp.async per thread per K (or V) tile
  static constexpr int kDimTiles = kHeadDim / 16;                // K steps of q.k; 16-dim tiles of O
  static constexpr int kTileBytes = kTileTokens * kHeadDim * 2;  // one K (or V) tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  // The epilogue reuses the pipeline's memory: O [warps][8 heads][kHeadDim + 4 floats], then
  // the warps' maxima and sums.
  static constexpr int kOStride = kHeadDim + 4;
  static constexpr int kEpilogueBytes = (kWarps * 8 * kOStride + 2 * kWarps * 8) * 4;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  // Page ids looked up a tile ahead of the tile's copies (TilePages) below this page size: a
  // tile of 64 tokens then spans at least 8 pages, its ids fresh kv_indices lines.
  static constexpr bool kLookAhead = kPageSize < kLookAheadBelowPage;

  static_assert(sizeof(T) == 2, "batch_decode runs on fp16 or bf16 (tensor-core MMAs)");
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head_dim must be 64, 128 or 256");
  static_assert(kGroup == 1 || kGroup == 2 || kGroup == 4 || kGroup == 8,
                "group (query heads per kv head) must be 1, 2, 4 or 8: the N of one mma is 8 heads");
  static_assert(kPageSize >= 1 && kPageSize <= 256 && (kPageSize & (kPageSize - 1)) == 0,
                "page_size must be a power of two of at most 256");
  static_assert(kWarps == 2 || kWarps == 4, "a block is 2 or 4 warps");
  static_assert(kStages >= 2, "the pipeline needs at least two stages");
  static_assert(kChunksPerRow % 8 == 0, "the swizzle permutes groups of 8 chunks: head_dim >= 64");
  static_assert(kThreads % kChunksPerRow == 0 && kTileTokens % kRowsPerPass == 0,
                "the block's threads cover whole token rows of a tile");
  static_assert(kEpilogueBytes <= kSmemBytes, "the epilogue fits in the pipeline's shared memory");
};

namespace detail {

using attention::kLn2;
using attention::kLog2E;
using attention::Logit;
using attention::NegativeInfinity;
using attention::SwizzledOffset;

// The page of each token row this thread copies in the tile at tile_start (one per pass; with
// pages that hold whole tiles, the tile's page in every entry). Looked up a tile ahead of its
// copies: with small pages (page_size 1: 64 page ids of a tile on two fresh lines of
// kv_indices) the lookup is an L2 round trip that would otherwise stall every tile's copies.
template <class Shape>
struct TilePages {
  int page[Shape::kPasses];
};

// Fills `pages` for the tile at tile_start: page -1 for positions outside [begin, end), and
// for a page-table offset outside kv_indices (only with a table that contradicts the plan).
template <class Shape>
__device__ __forceinline__ void LookUpTilePages(const KilnBatchDecodeParams& p, int page_begin, int tile_start,
                                                int begin, int end, TilePages<Shape>& pages) {
  constexpr int kPageSize = Shape::kPageSize;
  const int row0 = threadIdx.x / Shape::kChunksPerRow;
  auto page_of = [&](int pos) {
    const long long entry = static_cast<long long>(page_begin) + pos / kPageSize;
    return page_begin >= 0 && entry < p.num_indices ? __ldg(p.kv_indices + entry) : -1;
  };
  if constexpr (kPageSize % Shape::kTileTokens == 0) {
    // Tiles start at multiples of kTileTokens positions, so such a page holds whole tiles.
    const int tile_page = page_of(tile_start);
#pragma unroll
    for (int j = 0; j < Shape::kPasses; ++j) pages.page[j] = tile_page;
  } else {
#pragma unroll
    for (int j = 0; j < Shape::kPasses; ++j) {
      const int pos = tile_start + row0 + j * Shape::kRowsPerPass;
      pages.page[j] = pos >= begin && pos < end ? page_of(pos) : -1;
    }
  }
}

// Issues the cp.async copies of K and V for the tile of tokens at absolute positions tile_start...
// into shared memory, from the pages LookUpTilePages found; positions outside [begin, end), and
// page ids outside the cache, become zeros (their logits are masked, and zero V keeps
// 0 * garbage out of the MMA).
template <class Shape>
__device__ __forceinline__ void LoadTile(const KilnBatchDecodeParams& p, int kv_head, int tile_start, int begin,
                                         int end, const TilePages<Shape>& pages, unsigned k_dst, unsigned v_dst) {
  using T = typename Shape::T;
  constexpr int kPageSize = Shape::kPageSize;
  const int chunk = threadIdx.x % Shape::kChunksPerRow;
  const int row0 = threadIdx.x / Shape::kChunksPerRow;
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
  const long long token_stride = static_cast<long long>(p.num_kv_heads) * Shape::kHeadDim;
  const long long head_offset = static_cast<long long>(kv_head) * Shape::kHeadDim + chunk * 8;
#pragma unroll
  for (int j = 0; j < Shape::kPasses; ++j) {
    const int row = row0 + j * Shape::kRowsPerPass;
    const int pos = tile_start + row;
    const int page = pages.page[j];
    const bool valid = pos >= begin && pos < end && static_cast<unsigned>(page) < static_cast<unsigned>(p.num_pages);
    const long long in_page = (pos % kPageSize) * token_stride + head_offset;
    const T* k_src = valid ? k_cache + page * p.k_page_stride + in_page : k_cache;
    const T* v_src = valid ? v_cache + page * p.v_page_stride + in_page : v_cache;
    const unsigned offset = SwizzledOffset<Shape>(row, chunk);
    CpAsync16(k_dst + offset, k_src, valid);
    CpAsync16(v_dst + offset, v_src, valid);
  }
}

}  // namespace detail

// One block per (work item, kv head): blockIdx.x = item * num_kv_heads + kv_head (grid.x =
// schedule.num_items * num_kv_heads); Shape::kThreads threads, Shape::kSmemBytes of dynamic
// shared memory.
template <class Shape>
__device__ __forceinline__ void BatchDecode(const KilnBatchDecodeParams& p, unsigned char* smem) {
  using T = typename Shape::T;
  using Pair = typename PairOf<T>::type;
  constexpr int kHeadDim = Shape::kHeadDim;
  constexpr int kGroup = Shape::kGroup;
  constexpr int kPageSize = Shape::kPageSize;
  constexpr int kTileTokens = Shape::kTileTokens;
  constexpr int kDimTiles = Shape::kDimTiles;
  constexpr int kStages = Shape::kStages;
  const float kNegInf = detail::NegativeInfinity();

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int lane_row = lane / 4;  // the mma fragments' "group": a token (S^T), a dim (O^T) or a head (Q^T)
  const int lane_col = lane % 4;  // the "thread in group": heads 2 * lane_col and 2 * lane_col + 1
  // The kv heads of one item are neighbours in the grid: they read the same pages at the same
  // time (a page holds every kv head of its tokens), which keeps DRAM rows open.
  const int item = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.num_kv_heads));
  const int kv_head = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.num_kv_heads));

  // The request of this item and the positions [begin, end) it attends to.
  const KilnDecodeSchedule& schedule = p.schedule;
  int request = item;
  int chunk_in_request = 0;
  int request_items = 1;
  if (schedule.split) {
    int lo = 0, hi = schedule.batch;  // item_begin[lo] <= item < item_begin[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (schedule.item_begin[mid] <= item) lo = mid;
      else hi = mid;
    }
    request = lo;
    chunk_in_request = item - schedule.item_begin[lo];
    request_items = schedule.item_begin[lo + 1] - schedule.item_begin[lo];
  }
  const int page_begin = p.kv_indptr[request];
  const int pages = p.kv_indptr[request + 1] - page_begin;
  const int last_page_len = min(max(p.kv_last_page_len[request], 0), kPageSize);
  const int kv_len = pages > 0 ? (pages - 1) * kPageSize + last_page_len : 0;
  const int window_begin = p.window_left >= 0 ? max(0, kv_len - 1 - p.window_left) : 0;
  int begin = window_begin;
  int end = kv_len;
  if (schedule.split) {
    const long long chunk = window_begin / schedule.chunk_tokens + chunk_in_request;
    begin = static_cast<int>(max(static_cast<long long>(window_begin), chunk * schedule.chunk_tokens));
    end = static_cast<int>(min(static_cast<long long>(kv_len), (chunk + 1) * schedule.chunk_tokens));
  }
  const int first_tile = begin - begin % kTileTokens;
  const int num_tiles = end > begin ? (end - first_tile + kTileTokens - 1) / kTileTokens : 0;

  // Q^T as the B operand of every q.k mma: lane (r, c) holds q[head r][16s + 2c, +1] and
  // q[head r][16s + 8 + 2c, +1]; heads r >= kGroup are zeros.
  unsigned q_frag[kDimTiles][2];
  {
    const T* q_row = static_cast<const T*>(p.q) + request * p.q_stride_batch +
                     (kv_head * kGroup + lane_row) * p.q_stride_head;
#pragma unroll
    for (int s = 0; s < kDimTiles; ++s) {
      q_frag[s][0] = lane_row < kGroup ? *reinterpret_cast<const unsigned*>(q_row + 16 * s + 2 * lane_col) : 0u;
      q_frag[s][1] = lane_row < kGroup ? *reinterpret_cast<const unsigned*>(q_row + 16 * s + 8 + 2 * lane_col) : 0u;
    }
  }

  // This lane's share of the warp's state: heads 2c and 2c+1. The running maxima are the same
  // on every lane of a column; the sums are partial (this lane's tokens) until the end.
  float o[kDimTiles][4];
#pragma unroll
  for (int t = 0; t < kDimTiles; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.f, 0.f};

  const unsigned smem_base = SharedAddress(smem);
  detail::TilePages<Shape> tile_pages;  // of the next tile to copy (kLookAhead: looked up a tile before)
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) {
      const int tile_start = first_tile + s * kTileTokens;
      detail::LookUpTilePages<Shape>(p, page_begin, tile_start, begin, end, tile_pages);
      const unsigned k_dst = smem_base + s * Shape::kStageBytes;
      detail::LoadTile<Shape>(p, kv_head, tile_start, begin, end, tile_pages, k_dst, k_dst + Shape::kTileBytes);
    }
    CpAsyncCommit();  // empty groups too: the wait below counts groups
  }
  if (Shape::kLookAhead && kStages - 1 < num_tiles)
    detail::LookUpTilePages<Shape>(p, page_begin, first_tile + (kStages - 1) * kTileTokens, begin, end, tile_pages);

  for (int t = 0; t < num_tiles; ++t) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of tile t have landed
    __syncthreads();             // everyone's have; and nobody still reads tile t - 1's stage
    {
      const int next = t + kStages - 1;
      if (next < num_tiles) {
        const unsigned k_dst = smem_base + (next % kStages) * Shape::kStageBytes;
        if (!Shape::kLookAhead)
          detail::LookUpTilePages<Shape>(p, page_begin, first_tile + next * kTileTokens, begin, end, tile_pages);
        detail::LoadTile<Shape>(p, kv_head, first_tile + next * kTileTokens, begin, end, tile_pages, k_dst,
                                k_dst + Shape::kTileBytes);
        // Looking ahead: the page ids of the tile after it arrive while this tile is computed.
        if (Shape::kLookAhead && next + 1 < num_tiles)
          detail::LookUpTilePages<Shape>(p, page_begin, first_tile + (next + 1) * kTileTokens, begin, end, tile_pages);
      }
      CpAsyncCommit();
    }

    const int warp_start = first_tile + t * kTileTokens + warp * Shape::kWarpTokens;
    if (warp_start + Shape::kWarpTokens <= begin || warp_start >= end) continue;  // all masked
    const unsigned k_tile = smem_base + (t % kStages) * Shape::kStageBytes;
    const unsigned v_tile = k_tile + Shape::kTileBytes;

    // S^T = K Q^T: A = K rows (tokens) x 16 dims per step, ldmatrix matrices j = lane / 8:
    // tokens 8 * (j & 1) + lane % 8, dims 8 * (j >> 1).
    float sc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < kDimTiles; ++s) {
      unsigned a[4];
      const int row = warp * Shape::kWarpTokens + (lane & 7) + ((lane >> 3) & 1) * 8;
      LdMatrixX4(a, k_tile + detail::SwizzledOffset<Shape>(row, 2 * s + (lane >> 4)));
      Mma16x8x16<T>(sc, a, q_frag[s][0], q_frag[s][1]);
    }

    // sc: [0], [1] = token r, heads 2c, 2c+1; [2], [3] = token r + 8, same heads.
    const int pos0 = warp_start + lane_row;
    const int pos1 = pos0 + 8;
    const bool valid0 = pos0 >= begin && pos0 < end;
    const bool valid1 = pos1 >= begin && pos1 < end;
    float pr[4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float x0 = valid0 ? detail::Logit<Shape>(sc[i], p.logit_scale, p.cap_scale) : kNegInf;
      const float x1 = valid1 ? detail::Logit<Shape>(sc[2 + i], p.logit_scale, p.cap_scale) : kNegInf;
      float tile_max = fmaxf(x0, x1);
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 4));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 8));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 16));
      const float m_new = fmaxf(m[i], tile_max);
      const float m_ref = m_new == kNegInf ? 0.f : m_new;  // nothing seen yet: keep 2^-inf = 0
      const float alpha = Exp2(m[i] - m_ref);
      pr[i] = Exp2(x0 - m_ref);
      pr[2 + i] = Exp2(x1 - m_ref);
      l[i] = l[i] * alpha + pr[i] + pr[2 + i];
      m[i] = m_new;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        o[d][i] *= alpha;
        o[d][2 + i] *= alpha;
      }
    }
    // P^T as the B operand (k = tokens, n = heads): lane (r, c) needs tokens 2c, 2c+1 (+8) of
    // head r, the transpose of what it holds.
    const unsigned p_lo = MovMatrixTrans(PackPair<T>(pr[0], pr[1]));
    const unsigned p_hi = MovMatrixTrans(PackPair<T>(pr[2], pr[3]));

    // O^T += V^T P^T: A = V^T (16 dims x 16 tokens) from V rows with ldmatrix.trans, matrices
    // j = lane / 8: tokens 8 * (j >> 1) + lane % 8, dims 8 * (j & 1).
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      unsigned a[4];
      const int row = warp * Shape::kWarpTokens + (lane & 7) + (lane >> 4) * 8;
      LdMatrixX4Trans(a, v_tile + detail::SwizzledOffset<Shape>(row, 2 * d + ((lane >> 3) & 1)));
      Mma16x8x16<T>(o[d], a, p_lo, p_hi);
    }
  }
  CpAsyncWait<0>();
  __syncthreads();  // the pipeline's memory is free for the epilogue

  // The warps' states → shared memory. o[d]: [0], [1] = dim 16d + r, heads 2c, 2c+1;
  // [2], [3] = dim 16d + 8 + r.
  float* o_smem = reinterpret_cast<float*>(smem);
  float* m_smem = o_smem + Shape::kWarps * 8 * Shape::kOStride;
  float* l_smem = m_smem + Shape::kWarps * 8;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float sum = l[i];
    sum += __shfl_xor_sync(0xffffffffu, sum, 4);
    sum += __shfl_xor_sync(0xffffffffu, sum, 8);
    sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    const int head = 2 * lane_col + i;
    if (lane_row == 0) {
      m_smem[warp * 8 + head] = m[i];
      l_smem[warp * 8 + head] = sum;
    }
    float* row = o_smem + (warp * 8 + head) * Shape::kOStride;
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      row[16 * d + lane_row] = o[d][i];
      row[16 * d + 8 + lane_row] = o[d][2 + i];
    }
  }
  __syncthreads();

  const bool direct = request_items == 1;
  for (int index = threadIdx.x; index < kGroup * kHeadDim / 2; index += Shape::kThreads) {
    const int g = index / (kHeadDim / 2);
    const int dim = 2 * (index % (kHeadDim / 2));
    float m_max = kNegInf;
#pragma unroll
    for (int w = 0; w < Shape::kWarps; ++w) m_max = fmaxf(m_max, m_smem[w * 8 + g]);
    float sum = 0.f, o0 = 0.f, o1 = 0.f;
#pragma unroll
    for (int w = 0; w < Shape::kWarps; ++w) {
      const float m_w = m_smem[w * 8 + g];
      const float scale = m_w == kNegInf ? 0.f : Exp2(m_w - m_max);
      const float* row = o_smem + (w * 8 + g) * Shape::kOStride + dim;
      sum += scale * l_smem[w * 8 + g];
      o0 += scale * row[0];
      o1 += scale * row[1];
    }
    // No position at all (only with a page table that contradicts the plan): zeros, -inf.
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const float lse2 = sum > 0.f ? m_max + log2f(sum) : kNegInf;
    const int head = kv_head * kGroup + g;
    if (direct) {
      T* out = static_cast<T*>(p.out) + request * p.out_stride_batch + head * p.out_stride_head + dim;
      *reinterpret_cast<Pair*>(out) = FromFloat2<Pair>(o0 * inv, o1 * inv);
      if (dim == 0 && p.lse != nullptr) p.lse[request * p.lse_stride_batch + head] = lse2 * detail::kLn2;
    } else {
      const long long slot = static_cast<long long>(item) * p.num_qo_heads + head;
      *reinterpret_cast<float2*>(p.partial_out + slot * kHeadDim + dim) = make_float2(o0 * inv, o1 * inv);
      if (dim == 0) p.partial_lse[slot] = lse2;
    }
  }
}

}  // namespace decode
}  // namespace kiln
