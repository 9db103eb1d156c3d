// batch_prefill (ragged and paged): attention of a batch's queries over their keys/values
// (kiln/prefill/prefill_contract.h has the layouts, the schedule and the parameters). For query
// i of request b (kv position pos_i = kv_len - q_len + i) and query head h:
//
//   s_j = sm_scale * q[i, h] . k_j                         soft cap off
//   s_j = cap * tanh(sm_scale * q[i, h] . k_j / cap)       soft cap on
//   out[i, h] = sum_j softmax(s)_j v_j,   lse[i, h] = ln(sum_j exp(s_j))
//
// over the visible positions j: 0 <= j < kv_len, j <= pos_i (causal), j >= pos_i - window_left
// (window). FlashAttention-2 on warp-level tensor-core MMAs (mma.sync m16n8k16): one block takes
// kTileRows = 64 rows of one request and one kv head (row r: query r / kGroup, head
// kv_head * kGroup + r % kGroup, so the query heads of a kv head share every K/V byte); each of
// its 4 warps owns 16 rows. Per K/V tile of kTileKv positions:
//   S[16 rows x kTileKv] = Q[16 x D] K^T[D x kTileKv]   (Q: ldmatrix A fragments, kept in
//                                                        registers for D <= 128; K rows are
//                                                        the B columns, plain ldmatrix)
//   online softmax per row in fp32, in log2 units (logits pre-multiplied by log2 e), the row
//   statistics reduced over the 4 lanes (a "quad") that share a row of the C fragment
//   O[16 x D] += P[16 x kTileKv] V[kTileKv x D]          (P: the S accumulators rounded to T,
//                                                        which the m16n8k16 C layout hands to
//                                                        the next mma as its A layout directly;
//                                                        V with ldmatrix.trans)
// K and V stream through a cp.async ring of kStages (MmaStages: 3 at head_dim <= 128, 2 at 256)
// stages (16-byte copies, zero-filled out of range, XOR-swizzled 16-byte chunks so every
// ldmatrix is free of bank conflicts); tile t + kStages - 1's copies are issued before tile t is
// computed, so kStages - 1 tiles are in flight. Only tiles that cross a row's
// causal / window / kv_len limit take the per-element mask; tiles no row of a warp sees are
// skipped by that warp, and tiles no row of the block sees are never loaded. A request of one
// kv chunk writes `out` (rounded to T once, staged through shared memory for 16-byte stores)
// and `lse`; a chunk of a split request writes its normalized fp32 output and log2-sum-exp to
// the workspace for kiln/prefill/prefill_merge.cuh. A tile of at most 32 rows splits its warps:
// warps w and w + 2 own the same rows and take one half of every K/V tile each, merging their
// softmax states at the end (BatchPrefill), so all four warps run mmas.
//
// Safety: q rows, k/v rows (ragged) and page ids (paged) outside what the params say exists
// are never read; a page-table entry past num_indices or a page id outside [0, total_kv) reads
// as zeros and its positions are masked (only a table that contradicts the plan has them).
#pragma once

#include "kiln/common/numeric.cuh"
#include "kiln/decode/attention_math.cuh"
#include "kiln/decode/warp_mma.cuh"
#include "kiln/prefill/prefill_block.cuh"
#include "kiln/prefill/prefill_contract.h"

namespace kiln {
namespace prefill {

template <typename T_, int kHeadDim_, int kGroup_, bool kCausal_, bool kSoftCap_, bool kPaged_, int kPageSize_>
struct PrefillShape {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kGroup = kGroup_;
  static constexpr bool kCausal = kCausal_;
  static constexpr bool kSoftCap = kSoftCap_;
  static constexpr bool kPaged = kPaged_;
  static constexpr int kPageSize = kPageSize_;

  static constexpr int kTileKv = MmaTileKv(kHeadDim);      // kv positions per pipeline stage
  static constexpr int kChunksPerRow = kHeadDim * 2 / 16;  // 16-byte chunks of a row of Q, K or V
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kQPasses = kTileRows / kRowsPerPass;  // cp.async per thread for the Q tile
  static constexpr int kKvPasses = kTileKv / kRowsPerPass;   // ... for a K (or V) tile
  static constexpr int kDimSteps = kHeadDim / 16;            // k steps of Q K^T; 16-dim pairs of O's n tiles
  static constexpr int kKvSteps = kTileKv / 16;              // k steps of P V; pairs of S's n tiles
  static constexpr int kQBytes = kTileRows * kHeadDim * 2;
  static constexpr int kKvTileBytes = kTileKv * kHeadDim * 2;  // one K (or V) tile
  static constexpr int kStageBytes = 2 * kKvTileBytes;
  static constexpr int kStages = MmaStages(kHeadDim);
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes;
  // D <= 128: the Q fragments (kDimSteps * 4 registers) live in registers for the whole loop;
  // at D = 256 they would be 64 registers next to O's 128, so they are re-read with ldmatrix.
  static constexpr bool kQInRegisters = kHeadDim <= 128;
  // A page that holds whole K/V tiles needs one page-table lookup per tile (tiles start at
  // multiples of kTileKv).
  static constexpr bool kPageHoldsTiles = kPaged && kPageSize % kTileKv == 0;
  // Pages smaller than a tile at head_dim <= 128: the page-table entries of a tile's rows are
  // loaded a tile ahead (kKvPasses registers; head_dim 256 has none to spare), so a tile's
  // copies do not wait for their lookups: a kernel that streams a long KV for few rows
  // (speculative verification) is latency-bound.
  static constexpr bool kPrefetchPages = kPaged && !kPageHoldsTiles && kHeadDim <= 128;

  static_assert(sizeof(T) == 2, "batch_prefill runs on fp16 or bf16 (tensor-core MMAs)");
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head_dim must be 64, 128 or 256");
  static_assert(kGroup == 1 || kGroup == 2 || kGroup == 4 || kGroup == 8, "group must be 1, 2, 4 or 8");
  static_assert(kGroup <= kMaxGroup, "group is at most kMaxGroup");
  static_assert(kPaged ? (kPageSize >= 1 && kPageSize <= kMaxPageSize && (kPageSize & (kPageSize - 1)) == 0)
                       : kPageSize == 1,
                "page_size: a power of two up to kMaxPageSize when paged, 1 when ragged");
  static_assert(kChunksPerRow % 8 == 0, "the swizzle permutes groups of 8 chunks: head_dim >= 64");
  static_assert(kThreads % kChunksPerRow == 0 && kTileRows % kRowsPerPass == 0 && kTileKv % kRowsPerPass == 0,
                "the block's threads cover whole rows of the Q and K/V tiles");
  static_assert(kTileRows == 16 * kWarps, "a warp owns the 16 rows of one mma");
  static_assert(kTileKv % 16 == 0, "K/V tiles are whole k steps of P V");
  static_assert(kStages >= 2 && kStages <= 32, "a ring of stages; the invalid-page flags are a bit each");
  static_assert(kSmemBytes == MmaSmemBytes(kHeadDim), "the host sizes shared memory with PrefillSmemBytes");
};

namespace detail {

using decode::CpAsync16;
using decode::CpAsyncCommit;
using decode::CpAsyncWait;
using decode::Exp2;
using decode::LdMatrixX4;
using decode::LdMatrixX4Trans;
using decode::Mma16x8x16;
using decode::PackPair;
using decode::SharedAddress;

using attention::kLn2;
using attention::kLog2E;
using attention::Logit;
using attention::NegativeInfinity;
using attention::SwizzledOffset;

// Issues the cp.async copies of the Q tile: row r of the request's q_len * kGroup rows reads
// q[q_begin + r / kGroup, kv_head * kGroup + r % kGroup]; rows past `rows` become zeros.
template <class Shape>
__device__ __forceinline__ void LoadQ(const KilnBatchPrefillParams& p, long long q_begin, int row_begin, int rows,
                                      int kv_head, unsigned q_dst) {
  using T = typename Shape::T;
  const int chunk = threadIdx.x % Shape::kChunksPerRow;
  const int row0 = threadIdx.x / Shape::kChunksPerRow;
  const T* q = static_cast<const T*>(p.q);
#pragma unroll
  for (int j = 0; j < Shape::kQPasses; ++j) {
    const int row = row0 + j * Shape::kRowsPerPass;
    const int r = row_begin + row;
    const bool valid = r < rows;
    const long long token = q_begin + r / Shape::kGroup;
    const long long head = static_cast<long long>(kv_head) * Shape::kGroup + r % Shape::kGroup;
    const T* src = valid ? q + token * p.q_stride_token + head * p.q_stride_head + chunk * 8 : q;
    CpAsync16(q_dst + SwizzledOffset<Shape>(row, chunk), src, valid);
  }
}

// kPrefetchPages: the page-table entries (unchecked, PageEntry) of this thread's rows of the tile
// at tile_start; -1 past kv_len.
template <class Shape>
__device__ __forceinline__ void LoadPageEntries(const KilnBatchPrefillParams& p, const KvSource& kv, int tile_start,
                                                int (&entries)[Shape::kKvPasses]) {
  const int row0 = threadIdx.x / Shape::kChunksPerRow;
#pragma unroll
  for (int j = 0; j < Shape::kKvPasses; ++j) {
    const int pos = tile_start + row0 + j * Shape::kRowsPerPass;
    entries[j] = pos < kv.len ? PageEntry<Shape>(p, kv.begin, pos) : -1;
  }
}

// Issues the cp.async copies of the K and V tiles of positions tile_start ... tile_start +
// kTileKv - 1; positions >= kv_len, and those of invalid pages, become zeros (their logits are
// masked, and zero V keeps 0 * garbage out of the P V mma). Returns whether one of this thread's
// rows below kv_len had an invalid page. kPrefetchPages: `entries` holds the rows' page-table
// entries (LoadPageEntries), else it is unused.
template <class Shape>
__device__ __forceinline__ bool LoadKv(const KilnBatchPrefillParams& p, const KvSource& kv, int kv_head, int tile_start,
                                       unsigned k_dst, unsigned v_dst, const int (&entries)[Shape::kKvPasses]) {
  using T = typename Shape::T;
  constexpr int kHeadDim = Shape::kHeadDim;
  const int chunk = threadIdx.x % Shape::kChunksPerRow;
  const int row0 = threadIdx.x / Shape::kChunksPerRow;
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  bool bad = false;
  int tile_page = -1;
  if constexpr (Shape::kPageHoldsTiles) tile_page = PageOf<Shape>(p, kv.begin, tile_start);
#pragma unroll
  for (int j = 0; j < Shape::kKvPasses; ++j) {
    const int row = row0 + j * Shape::kRowsPerPass;
    const int pos = tile_start + row;
    bool valid = pos < kv.len;
    const T* k_src = k;
    const T* v_src = v;
    if constexpr (Shape::kPaged) {
      int page = tile_page;
      if constexpr (Shape::kPrefetchPages) page = valid ? ValidPage(p, entries[j]) : -1;
      else if constexpr (!Shape::kPageHoldsTiles) page = valid ? PageOf<Shape>(p, kv.begin, pos) : -1;
      bad = bad || (valid && page < 0);
      valid = valid && page >= 0;
      // Inside a page: [page_size, num_kv_heads, head_dim], dense.
      const long long in_page = (static_cast<long long>(pos % Shape::kPageSize) * p.num_kv_heads + kv_head) * kHeadDim +
                                chunk * 8;
      if (valid) {
        k_src = k + page * p.k_stride_token + in_page;
        v_src = v + page * p.v_stride_token + in_page;
      }
    } else {
      const long long token = kv.begin + pos;
      if (valid) {
        k_src = k + token * p.k_stride_token + kv_head * p.k_stride_head + chunk * 8;
        v_src = v + token * p.v_stride_token + kv_head * p.v_stride_head + chunk * 8;
      }
    }
    const unsigned offset = SwizzledOffset<Shape>(row, chunk);
    CpAsync16(k_dst + offset, k_src, valid);
    CpAsync16(v_dst + offset, v_src, valid);
  }
  return bad;
}

// One warp's online-softmax step over the S tile in `s` (raw q.k sums in, P out, in place) of
// kCols positions: logits in log2 units, masked to -inf where kMasked and the position is not
// visible to the row, the running maxima m and the lane's partial sums l updated, O rescaled.
// Lane (g, c) holds rows g (s[n][0], s[n][1]) and g + 8 (s[n][2], s[n][3]), positions
// tile_start + 8n + 2c, +1.
template <class Shape, int kCols, bool kMasked>
__device__ __forceinline__ void SoftmaxStep(const KilnBatchPrefillParams& p, float (&s)[kCols / 8][4],
                                            float (&o)[Shape::kHeadDim / 8][4], float (&m)[2], float (&l)[2],
                                            const RowRange (&range)[2], int tile_start, bool check_pages,
                                            long long page_begin) {
  constexpr int kNTiles = kCols / 8;
  static_assert(2 * kNTiles <= 32, "one bit per column of the lane");
  const float kNegInf = NegativeInfinity();
  const int lane_col = threadIdx.x % 4;
  // Paged, a tile with an invalid page (only a table that contradicts the plan has one): bit
  // 2n + k set for the lane's column 8n + 2 * lane_col + k if its page is invalid. A rolled loop:
  // this path is never fast, and unrolled it would cost every variant registers.
  unsigned bad_columns = 0;
  if constexpr (kMasked && Shape::kPaged) {
    if (check_pages) {
#pragma unroll 1
      for (int column = 0; column < 2 * kNTiles; ++column) {
        const int pos = tile_start + 8 * (column >> 1) + 2 * lane_col + (column & 1);
        if (PageOf<Shape>(p, page_begin, pos) < 0) bad_columns |= 1u << column;
      }
    }
  }
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = Logit<Shape>(s[n][e], p.logit_scale, p.cap_scale);
      if constexpr (kMasked) {
        const int pos = tile_start + 8 * n + 2 * lane_col + (e & 1);
        const RowRange& rr = range[e >> 1];
        const bool visible = pos >= rr.lo && pos <= rr.hi && !((bad_columns >> (2 * n + (e & 1))) & 1u);
        if (!visible) x = kNegInf;
      }
      s[n][e] = x;
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float tile_max = kNegInf;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) tile_max = fmaxf(tile_max, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
    // The 4 lanes of a quad (lane_col 0..3) hold the row's other columns.
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float m_new = fmaxf(m[i], tile_max);
    const float m_ref = m_new == kNegInf ? 0.f : m_new;  // nothing seen yet: keep 2^-inf = 0
    const float alpha = Exp2(m[i] - m_ref);
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      s[n][2 * i] = Exp2(s[n][2 * i] - m_ref);
      s[n][2 * i + 1] = Exp2(s[n][2 * i + 1] - m_ref);
      sum += s[n][2 * i] + s[n][2 * i + 1];
    }
    l[i] = l[i] * alpha + sum;
    m[i] = m_new;
#pragma unroll
    for (int d = 0; d < Shape::kHeadDim / 8; ++d) {
      o[d][2 * i] *= alpha;
      o[d][2 * i + 1] *= alpha;
    }
  }
}

// One warp's share of a K/V tile: positions tile_start + col0 ... + kCols - 1 (the tile's rows
// col0 .. in shared memory) against its 16 rows. S = Q K^T, the softmax step, O += P V; nothing
// when none of the warp's rows sees those positions.
template <class Shape, int kCols>
__device__ __forceinline__ void WarpTileStep(const KilnBatchPrefillParams& p, unsigned k_tile, int tile_start, int col0,
                                             bool tile_bad, bool warp_active, const RowRange& warp_first_range,
                                             const RowRange& warp_last_range, const RowRange (&range)[2],
                                             const unsigned (&q_frag)[Shape::kQInRegisters ? Shape::kDimSteps : 1][4],
                                             unsigned q_smem, int q_row, long long page_begin,
                                             float (&o)[Shape::kHeadDim / 8][4], float (&m)[2], float (&l)[2]) {
  using T = typename Shape::T;
  constexpr int kSteps = kCols / 16;
  static_assert(kCols % 16 == 0 && Shape::kTileKv % kCols == 0, "whole k steps of P V inside a tile");
  const int lane = threadIdx.x % 32;
  const int start = tile_start + col0;
  const int last = start + kCols - 1;
  if (!warp_active || last < warp_first_range.lo || start > warp_last_range.hi) return;
  const unsigned v_tile = k_tile + Shape::kKvTileBytes;

  // S = Q K^T. B (16 dims x 8 positions, "col") of n tile n is K rows col0 + 8n.. as they lie in
  // memory: ldmatrix matrices j = lane / 8 are positions 16np + 8 * (j >> 1) + lane % 8, dims
  // 16ks + 8 * (j & 1), i.e. b0, b1 of n tile 2np and b0, b1 of n tile 2np + 1.
  float s[kCols / 8][4];
#pragma unroll
  for (int n = 0; n < kCols / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < Shape::kDimSteps; ++ks) {
    unsigned a[4];
    if constexpr (Shape::kQInRegisters) {
      a[0] = q_frag[ks][0], a[1] = q_frag[ks][1], a[2] = q_frag[ks][2], a[3] = q_frag[ks][3];
    } else {
      LdMatrixX4(a, q_smem + SwizzledOffset<Shape>(q_row, 2 * ks + (lane >> 4)));
    }
#pragma unroll
    for (int np = 0; np < kSteps; ++np) {
      unsigned b[4];
      const int row = col0 + 16 * np + (lane & 7) + (lane >> 4) * 8;
      LdMatrixX4(b, k_tile + SwizzledOffset<Shape>(row, 2 * ks + ((lane >> 3) & 1)));
      Mma16x8x16<T>(s[2 * np], a, b[0], b[1]);
      Mma16x8x16<T>(s[2 * np + 1], a, b[2], b[3]);
    }
  }

  // Per-element masks only where a row's limit cuts these positions (or a page is invalid).
  const bool full = !tile_bad && start >= warp_last_range.lo && last <= warp_first_range.hi;
  if (full) {
    SoftmaxStep<Shape, kCols, false>(p, s, o, m, l, range, start, false, page_begin);
  } else {
    SoftmaxStep<Shape, kCols, true>(p, s, o, m, l, range, start, tile_bad, page_begin);
  }

  // O += P V. A (16 rows x 16 positions) of k step kk is P's n tiles 2kk and 2kk + 1: the C
  // fragment pairs (row g, cols 2c..; row g + 8, ...) are exactly a0..a3. B (16 positions x 8
  // dims) is V^T: ldmatrix.trans matrices j = lane / 8 are positions 16kk + 8 * (j & 1) +
  // lane % 8, dims 16dp + 8 * (j >> 1), i.e. b0, b1 of dim tile 2dp and b0, b1 of 2dp + 1.
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    const unsigned a[4] = {PackPair<T>(s[2 * kk][0], s[2 * kk][1]), PackPair<T>(s[2 * kk][2], s[2 * kk][3]),
                           PackPair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                           PackPair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
    const int row = col0 + 16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int dp = 0; dp < Shape::kDimSteps; ++dp) {
      unsigned b[4];
      LdMatrixX4Trans(b, v_tile + SwizzledOffset<Shape>(row, 2 * dp + (lane >> 4)));
      Mma16x8x16<T>(o[2 * dp], a, b[0], b[1]);
      Mma16x8x16<T>(o[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// A split block's handoff (BatchPrefill): a lane's softmax state, m[2], l[2] and O, is
// kStateValues floats; value v of slice s's lane sits at handoff[(v * 2 + s) * 32 + lane]
// (consecutive lanes in consecutive words: no bank conflicts), in the K/V stages.
template <class Shape>
constexpr int kStateValues = 4 + Shape::kHeadDim / 2;

template <class Shape>
__device__ __forceinline__ void StoreSoftmaxState(float* handoff, int slice, const float (&o)[Shape::kHeadDim / 8][4],
                                                  const float (&m)[2], const float (&l)[2]) {
  static_assert(kStateValues<Shape> * 2 * 32 * 4 <= Shape::kStages * Shape::kStageBytes,
                "the handoff fits the K/V stages");
  float* at = handoff + slice * 32 + threadIdx.x % 32;
  at[0] = m[0], at[64] = m[1], at[2 * 64] = l[0], at[3 * 64] = l[1];
#pragma unroll
  for (int d = 0; d < Shape::kHeadDim / 8; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e) at[(4 + 4 * d + e) * 64] = o[d][e];
  }
}

// Folds the partner's state (StoreSoftmaxState) into this lane's: both are online-softmax states
// of the same rows over disjoint positions, so each is rescaled to the larger maximum. A row
// neither saw keeps m = -inf, l = 0.
template <class Shape>
__device__ __forceinline__ void MergeSoftmaxState(const float* handoff, int slice, float (&o)[Shape::kHeadDim / 8][4],
                                                  float (&m)[2], float (&l)[2]) {
  const float kNegInf = NegativeInfinity();
  const float* at = handoff + slice * 32 + threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float m_other = at[i * 64];
    const float m_new = fmaxf(m[i], m_other);
    const float m_ref = m_new == kNegInf ? 0.f : m_new;
    const float mine = Exp2(m[i] - m_ref), theirs = Exp2(m_other - m_ref);
    l[i] = l[i] * mine + at[(2 + i) * 64] * theirs;
    m[i] = m_new;
#pragma unroll
    for (int d = 0; d < Shape::kHeadDim / 8; ++d) {
      o[d][2 * i] = o[d][2 * i] * mine + at[(4 + 4 * d + 2 * i) * 64] * theirs;
      o[d][2 * i + 1] = o[d][2 * i + 1] * mine + at[(4 + 4 * d + 2 * i + 1) * 64] * theirs;
    }
  }
}

}  // namespace detail

// One block per (work item, kv head): grid = (schedule.num_items, num_kv_heads), kThreads
// threads, Shape::kSmemBytes (PrefillSmemBytes) of dynamic shared memory, 128-byte aligned.
template <class Shape>
__device__ __forceinline__ void BatchPrefill(const KilnBatchPrefillParams& p, unsigned char* smem) {
  using T = typename Shape::T;
  using Pair = typename PairOf<T>::type;
  constexpr int kHeadDim = Shape::kHeadDim;
  constexpr int kGroup = Shape::kGroup;
  constexpr int kTileKv = Shape::kTileKv;
  constexpr int kDimSteps = Shape::kDimSteps;
  const float kNegInf = detail::NegativeInfinity();

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int lane_row = lane / 4;  // the mma fragments' "group": rows lane_row and lane_row + 8
  const int lane_col = lane % 4;  // the "thread in group": columns 2 * lane_col, +1 of each n tile
  // The block's (item, kv head): kv-head-fastest where the plan says no two items share K/V
  // (KilnPrefillSchedule::heads_fastest), so the blocks that run at once read whole K/V rows.
  int item = blockIdx.x, kv_head = blockIdx.y;
  if (p.schedule.heads_fastest) {
    const unsigned linear = blockIdx.y * gridDim.x + blockIdx.x;
    item = static_cast<int>(linear / gridDim.y);
    kv_head = static_cast<int>(linear % gridDim.y);
  }

  // The request, row tile and kv chunk of this item, and the kv range its rows see.
  detail::PrefillBlock block;
  if (!detail::LocatePrefillBlock<Shape, kTileRows, kTileKv>(p, item, block)) return;
  const long long q_begin = block.q_begin;
  const int q_len = block.q_len, rows = block.rows, row_begin = block.row_begin, chunks = block.chunks;
  const detail::KvSource kv = block.kv;
  const int first_tile = block.first_tile, num_tiles = block.num_tiles;
  const int window_left = p.window_left;

  // Split (a tile of at most 32 rows: verification, decode-like batches): warps w and w + 2 own
  // the same 16 rows (slice w % 2), and each computes one half of every K/V tile (part w / 2)
  // with its own softmax state; part 1 hands its state to part 0 at the end. Otherwise warps 2
  // and 3 would idle while warps 0 and 1 ran every mma on two of the SM's four tensor units.
  const bool split = rows - row_begin <= kTileRows / 2;
  const int slice = split ? warp % 2 : warp;
  const int part = split ? warp / 2 : 0;
  // This warp's rows and the extremes of their visible ranges: the first row has the lowest
  // bounds and the last valid row the highest (both grow with the query position).
  const int warp_row = row_begin + 16 * slice;
  const bool warp_active = warp_row < rows;
  const int warp_last = min(warp_row + 15, rows - 1);
  const detail::RowRange warp_first_range = detail::VisibleRange<Shape>(warp_row, kv.len, q_len, window_left);
  const detail::RowRange warp_last_range = detail::VisibleRange<Shape>(warp_last, kv.len, q_len, window_left);
  // This lane's two rows.
  detail::RowRange range[2];
  range[0] = detail::VisibleRange<Shape>(warp_row + lane_row, kv.len, q_len, window_left);
  range[1] = detail::VisibleRange<Shape>(warp_row + lane_row + 8, kv.len, q_len, window_left);

  const unsigned smem_base = detail::SharedAddress(smem);
  const unsigned q_smem = smem_base;
  const unsigned kv_smem = smem_base + Shape::kQBytes;

  // Prologue: the Q tile (its own cp.async group), then K/V tiles 0 .. kStages - 2 (a group
  // each, empty past the last tile, so that group counts stay those of the ring).
  constexpr int kStages = Shape::kStages;
  detail::LoadQ<Shape>(p, q_begin, row_begin, rows, kv_head, q_smem);
  detail::CpAsyncCommit();
  // Bit s: the tile in flight in stage s had an invalid page (among this thread's rows).
  unsigned pending_bad = 0;
  // kPrefetchPages: the page-table entries of the next tile to load.
  int entries[Shape::kKvPasses] = {};
  if constexpr (Shape::kPrefetchPages) {
    if (num_tiles > 0) detail::LoadPageEntries<Shape>(p, kv, first_tile, entries);
  }
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < num_tiles) {
      const unsigned k_dst = kv_smem + i * Shape::kStageBytes;
      const bool bad = detail::LoadKv<Shape>(p, kv, kv_head, first_tile + i * kTileKv, k_dst,
                                             k_dst + Shape::kKvTileBytes, entries);
      pending_bad |= static_cast<unsigned>(bad) << i;
      if constexpr (Shape::kPrefetchPages) {
        if (i + 1 < num_tiles) detail::LoadPageEntries<Shape>(p, kv, first_tile + (i + 1) * kTileKv, entries);
      }
    }
    detail::CpAsyncCommit();
  }
  detail::CpAsyncWait<kStages - 1>();  // this thread's Q copies have landed
  __syncthreads();                     // everyone's have

  // Q as the A operand of Q K^T, 16 dims per k step; ldmatrix matrices j = lane / 8: rows
  // 8 * (j & 1) + lane % 8, dims 8 * (j >> 1) (a0..a3 of "Matrix fragments for mma.m16n8k16").
  const int q_row = 16 * slice + (lane & 7) + ((lane >> 3) & 1) * 8;
  unsigned q_frag[Shape::kQInRegisters ? kDimSteps : 1][4];
  if constexpr (Shape::kQInRegisters) {
#pragma unroll
    for (int ks = 0; ks < kDimSteps; ++ks) {
      detail::LdMatrixX4(q_frag[ks], q_smem + detail::SwizzledOffset<Shape>(q_row, 2 * ks + (lane >> 4)));
    }
  }

  // Lane (g, c): O rows g ([0], [1]) and g + 8 ([2], [3]), dims 8d + 2c, +1 of n tile d. The
  // running maxima are the same on the 4 lanes of a quad; the sums are partial until the end.
  float o[kHeadDim / 8][4];
#pragma unroll
  for (int d = 0; d < kHeadDim / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.f, 0.f};

  int stage = 0;  // t % kStages
  for (int t = 0; t < num_tiles; ++t) {
    detail::CpAsyncWait<kStages - 2>();  // this thread's copies of tile t have landed
    // Everyone's have; nobody still reads tile t - 1's stage, which tile t + kStages - 1 takes.
    // Paged: also whether any row of tile t had an invalid page (bar.red.or, the same barrier).
    bool tile_bad = false;
    if constexpr (Shape::kPaged) tile_bad = __syncthreads_or((pending_bad >> stage) & 1u) != 0;
    else __syncthreads();
    const int tile_start = first_tile + t * kTileKv;
    const int load_stage = stage == 0 ? kStages - 1 : stage - 1;
    if (t + kStages - 1 < num_tiles) {
      const unsigned k_dst = kv_smem + load_stage * Shape::kStageBytes;
      const bool bad = detail::LoadKv<Shape>(p, kv, kv_head, tile_start + (kStages - 1) * kTileKv, k_dst,
                                             k_dst + Shape::kKvTileBytes, entries);
      pending_bad = (pending_bad & ~(1u << load_stage)) | (static_cast<unsigned>(bad) << load_stage);
      if constexpr (Shape::kPrefetchPages) {
        if (t + kStages < num_tiles) detail::LoadPageEntries<Shape>(p, kv, tile_start + kStages * kTileKv, entries);
      }
    }
    detail::CpAsyncCommit();
    const unsigned k_tile = kv_smem + stage * Shape::kStageBytes;
    if (++stage == kStages) stage = 0;

    if (split) {
      detail::WarpTileStep<Shape, kTileKv / 2>(p, k_tile, tile_start, part * (kTileKv / 2), tile_bad, warp_active,
                                               warp_first_range, warp_last_range, range, q_frag, q_smem, q_row,
                                               kv.begin, o, m, l);
    } else {
      detail::WarpTileStep<Shape, kTileKv>(p, k_tile, tile_start, 0, tile_bad, warp_active, warp_first_range,
                                           warp_last_range, range, q_frag, q_smem, q_row, kv.begin, o, m, l);
    }
  }
  detail::CpAsyncWait<0>();  // nothing may still land in shared memory (num_tiles == 0: Q's copies)
  if (split) {
    // Part 1's state through the K/V stages (nobody reads them any more) to part 0.
    __syncthreads();
    float* handoff = reinterpret_cast<float*>(smem + Shape::kQBytes);
    if (part == 1) {
      if (warp_active) detail::StoreSoftmaxState<Shape>(handoff, slice, o, m, l);
      __syncthreads();
      return;
    }
    __syncthreads();
    if (warp_active) detail::MergeSoftmaxState<Shape>(handoff, slice, o, m, l);
  }
  if (!warp_active) return;

  // The rows' sums over their quads; a row that saw nothing has l == 0: out 0, lse -inf.
  float inv[2], lse2[2];
  detail::FinishRows(m, l, inv, lse2);
  const int head_base = kv_head * kGroup;

  if (chunks > 1) {
    // A chunk of a split request: normalized fp32 rows of the workspace, its log2-sum-exp.
    const long long slot0 = (static_cast<long long>(item) * p.num_kv_heads + kv_head) * kTileRows + 16 * slice;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int rr = lane_row + 8 * i;
      if (warp_row + rr >= rows) continue;
      float* part = p.partial_out + (slot0 + rr) * kHeadDim + 2 * lane_col;
#pragma unroll
      for (int d = 0; d < kHeadDim / 8; ++d) {
        *reinterpret_cast<float2*>(part + 8 * d) = make_float2(o[d][2 * i] * inv[i], o[d][2 * i + 1] * inv[i]);
      }
      if (lane_col == 0) p.partial_lse[slot0 + rr] = lse2[i];
    }
    return;
  }

  // out: the warp's 16 rows rounded to T into its own 16 rows of the Q tile (only this warp
  // ever read them), then 16-byte stores of whole row chunks.
  __syncwarp();  // the warp's ldmatrix reads of Q are done before its rows are overwritten
  unsigned char* q_tile = smem;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = 16 * slice + lane_row + 8 * i;
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      *reinterpret_cast<Pair*>(q_tile + detail::SwizzledOffset<Shape>(row, d) +
                               4 * lane_col) = FromFloat2<Pair>(o[d][2 * i] * inv[i], o[d][2 * i + 1] * inv[i]);
    }
  }
  __syncwarp();
  T* out = static_cast<T*>(p.out);
  for (int index = lane; index < 16 * Shape::kChunksPerRow; index += 32) {
    const int rr = index / Shape::kChunksPerRow;
    const int ch = index % Shape::kChunksPerRow;
    const int r = warp_row + rr;
    if (r >= rows) break;  // rows only grow with index
    const long long token = q_begin + r / kGroup;
    const long long head = head_base + r % kGroup;
    const uint4 value = *reinterpret_cast<const uint4*>(q_tile + detail::SwizzledOffset<Shape>(16 * slice + rr, ch));
    *reinterpret_cast<uint4*>(out + token * p.out_stride_token + head * p.out_stride_head + ch * 8) = value;
  }
  if (p.lse != nullptr && lane_col == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = warp_row + lane_row + 8 * i;
      if (r >= rows) continue;
      const long long token = q_begin + r / kGroup;
      p.lse[token * p.lse_stride_token + head_base + r % kGroup] = lse2[i] * detail::kLn2;
    }
  }
}

}  // namespace prefill
}  // namespace kiln
