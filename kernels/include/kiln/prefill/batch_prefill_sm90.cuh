// batch_prefill on Hopper (sm_90a), head_dim 64 and 128: the same op and semantics as
// kiln/prefill/batch_prefill.cuh (masks, soft cap, window, ragged / paged K/V, invalid pages,
// split-chunk workspace, lse in natural log), computed FlashAttention-3 style with wgmma and
// warp specialization.
//
// A block (grid = (schedule.num_items, num_kv_heads), kThreads = 384 threads = 3 warpgroups,
// Shape::kSmemBytes of dynamic shared memory) takes kTileRows = 128 rows of one request and one
// kv head (row r: query r / kGroup, head kv_head * kGroup + r % kGroup). blockIdx.x is walked
// backwards (item = gridDim.x - 1 - blockIdx.x) so the heaviest row tiles start first.
//   - warpgroup 0, the producer (setmaxnreg.dec to kProducerRegs = 56), loads the Q tile once,
//     then K and V tiles of kTileKv = 128 positions into a ring of kStages (2) stages. Ragged,
//     or pages of 8 and up, with kv_tma (the host's default): TMA, one warp (ProduceKvTma; the
//     tile that crosses kv_len by cp.async). Otherwise all with 16-byte cp.async (zero-filled past kv_len or for
//     invalid pages) whose completion arrives on mbarriers (cp.async.mbarrier.arrive.noinc; 128
//     arrivals a phase): q_full, k_full[s], v_full[s]. It waits on k_empty[s] / v_empty[s] (one
//     arrival per consumer warp, 8) before it overwrites a stage. Paged: the producers OR their invalid-page flags
//     (bar.red.or, named barrier 1) and thread 0 publishes the stage's flag with one more (release) arrival on k_full.
//     Pages smaller than a tile: producer thread i looks up the page of the tile's position i one tile ahead (its load
//     in flight while the current tile is copied) and stages it in shared memory (kStages x 128 ids), so each row's
//     copy reads its page there and K and V share one lookup per position; the same bar.red.or makes the ids visible.
//   - warpgroups 1 and 2, the consumers (setmaxnreg.inc to kConsumerRegs = 224), own 64 rows
//     each:
//       S[64 x 128] = Q K^T      wgmma SS m64n128k16, Q and K K-major, 128-byte swizzled
//       online softmax in fp32 registers, log2 units, row stats over the 4 lanes of a quad
//       O[64 x D] += P V         wgmma RS m64nDk16: P (the S accumulators rounded to T) is
//                                the A operand in registers, V [kv][d] the B operand read
//                                MN-major (imm-trans-b = 1; LBO = 64-dim column block, SBO =
//                                8 kv rows)
//     kOverlap: one step issues S_t = Q K_t^T and O += P_{t-1} V_{t-1} together; the softmax
//     of tile t runs while that PV is in flight (FA3's intra-warpgroup pipelining); K's stage
//     is released when S_t is done, V's when the PV is.
//     kPingpong (default): the two consumers take turns issuing their steps (named barriers
//     4 and 5, 256 threads: wait on one's own, arrive on the other's), so one warpgroup's
//     softmax runs while the other's wgmmas do.
// Shared-memory tiles are 64-element-wide column blocks of 128-byte rows (a block per 64 of
// head_dim, 16 KiB for 128 rows) with 16-byte chunk c of row r at chunk c ^ (r % 8): the
// 128-byte swizzle the wgmma descriptors name. The epilogue stages O (rounded to T once) in
// the warpgroup's own rows of the Q tile for 16-byte stores; split chunks write fp32 rows and
// the log2-sum-exp to the workspace at row (item * num_kv_heads + kv_head) * kTileRows + r.
//
// Requirements the host plan must meet: row tiles of kTileRows = 128, K/V tiles (KvBase's
// tile_kv, chunk_tokens a multiple) of kTileKv = 128, 384 threads, Shape::kSmemBytes, and the
// merge with kTileRows = 128: the contract's TileKv, PrefillThreads and PrefillSmemBytes
// (prefill_contract.h) say exactly this for tile_rows 128 (head_dim 64 and 128). Without the soft cap the logit scale
// is folded into the exponent after the row max of the raw q.k, so logit_scale must be > 0.
#pragma once

#include "kiln/common/numeric.cuh"
#include "kiln/decode/attention_math.cuh"
#include "kiln/decode/warp_mma.cuh"
#include "kiln/gemm/hopper.cuh"
#include "kiln/gemm/wgmma_calls.cuh"
#include "kiln/prefill/prefill_block.cuh"
#include "kiln/prefill/prefill_contract.h"
#include "kiln/prefill/wgmma_rs_calls.cuh"

namespace kiln {
namespace prefill_sm90 {

using prefill::KilnBatchPrefillParams;
using prefill::KilnPrefillSchedule;
using prefill::kMaxListedBatch;
using prefill::kMaxPageSize;
using prefill::KvBase;

constexpr int kTileRows = prefill::kSm90TileRows;  // rows of a block: 2 consumer warpgroups x 64
constexpr int kConsumers = 2;
constexpr int kThreads = prefill::kSm90Threads;
constexpr int kTileKv = prefill::kSm90TileKv;  // kv positions per stage (head_dim 64 and 128)
static_assert(kThreads == 128 * (1 + kConsumers), "one producer and two consumer warpgroups");
constexpr int kProducerRegs = 56;
constexpr int kConsumerRegs = 224;
// setmaxnreg.inc waits until the registers are free: what the producer gives back must cover
// what the consumers take, out of the launch allocation of 168 per thread (384 threads).
constexpr int kLaunchRegs = 168;
static_assert(kProducerRegs % 8 == 0 && kConsumerRegs % 8 == 0, "setmaxnreg takes multiples of 8");
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= kLaunchRegs * kThreads,
              "the consumers cannot take more registers than the producer releases");

template <typename T_, int kHeadDim_, int kGroup_, bool kCausal_, bool kSoftCap_, bool kPaged_, int kPageSize_,
          bool kOverlap_ = true, int kStages_ = prefill::kSm90Stages, bool kPingpong_ = true>
struct Sm90Shape {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kGroup = kGroup_;
  static constexpr bool kCausal = kCausal_;
  static constexpr bool kSoftCap = kSoftCap_;
  static constexpr bool kPaged = kPaged_;
  static constexpr int kPageSize = kPageSize_;
  static constexpr bool kOverlap = kOverlap_;
  static constexpr int kStages = kStages_;
  // kOverlap only: the two consumer warpgroups take turns issuing their wgmmas (named
  // barriers), so one's softmax runs while the other's GEMMs do.
  static constexpr bool kPingpong = kPingpong_ && kOverlap_;

  static constexpr int kChunksPerRow = kHeadDim / 8;        // 16-byte chunks of a row
  static constexpr int kRowsPerPass = 128 / kChunksPerRow;  // rows the producer covers per pass
  static constexpr int kQPasses = kTileRows / kRowsPerPass;
  static constexpr int kKvPasses = kTileKv / kRowsPerPass;
  static constexpr int kColBlockBytes = 128 * 128;  // 64 columns of a 128-row tile
  static constexpr int kQBytes = kTileRows * kHeadDim * 2;
  static constexpr int kKvBytes = kTileKv * kHeadDim * 2;
  static constexpr int kBarrierBytes = 256;
  static constexpr int kPageIdBytes = kStages * kTileKv * 4;  // page ids of each stage's positions
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kKvBytes + kBarrierBytes + kPageIdBytes;
  static constexpr int kSRegs = kTileKv / 2;   // fp32 S accumulators per consumer thread
  static constexpr int kORegs = kHeadDim / 2;  // fp32 O accumulators per consumer thread
  static constexpr bool kPageHoldsTiles = kPaged && kPageSize % kTileKv == 0;
  // Pages smaller than a tile: one page id per position, staged in shared memory per stage.
  static constexpr bool kPageTable = kPaged && !kPageHoldsTiles;
  // K/V tiles may come through TMA (when the host sets kv_tma): ragged, or pages of
  // kMinTmaPage positions and up (a TMA box of whole 1024-byte swizzle atoms per page).
  static constexpr bool kTmaKv = !kPaged || kPageSize >= prefill::kMinTmaPage;

  static_assert(sizeof(T) == 2, "fp16 or bf16");
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head_dim 64 or 128 (256 stays on the mma.sync kernel)");
  static_assert(kGroup == 1 || kGroup == 2 || kGroup == 4 || kGroup == 8, "group 1, 2, 4 or 8");
  static_assert(kPaged ? (kPageSize >= 1 && kPageSize <= kMaxPageSize && (kPageSize & (kPageSize - 1)) == 0)
                       : kPageSize == 1,
                "page_size");
  static_assert(kStages >= 2 && kStages <= 4, "stages");
  static_assert(kSmemBytes <= 232448, "shared memory");
  static_assert(kTileRows == 128 && kTileKv == 128, "the tile tables below assume 128 x 128");
  static_assert(kSmemBytes == prefill::PrefillSmemBytes(kHeadDim, kTileRows) || kStages != prefill::kSm90Stages,
                "the host sizes shared memory with PrefillSmemBytes");
};

namespace detail {

using attention::kLn2;
using attention::NegativeInfinity;
using decode::CpAsync16;
using decode::Exp2;
using decode::PackPair;
using gemm::BarrierArrive;
using gemm::BarrierInit;
using gemm::BarrierWait;
using prefill::detail::KvSource;
using prefill::detail::LocatePrefillBlock;
using prefill::detail::PageEntry;
using prefill::detail::PageOf;
using prefill::detail::PrefillBlock;
using prefill::detail::RowRange;
using prefill::detail::ValidPage;
using prefill::detail::VisibleRange;

struct Barriers {
  unsigned long long q_full;
  unsigned long long k_full[4];
  unsigned long long v_full[4];
  unsigned long long k_empty[4];
  unsigned long long v_empty[4];
  int stage_bad[4];  // paged: some position of the stage's tile had an invalid page
};
static_assert(sizeof(Barriers) <= 256, "barriers fit kBarrierBytes");

// Byte offset of 16-byte chunk `chunk` of row `row` in a 128-row tile.
__device__ __forceinline__ unsigned TileOffset(int row, int chunk) {
  return static_cast<unsigned>((chunk >> 3) * (128 * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// The arrival of this thread's earlier cp.async copies on `bar` once they have landed; the
// barrier's expected count includes it (.noinc).
__device__ __forceinline__ void CpAsyncArriveNoinc(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(SmemAddress(bar)) : "memory");
}

// Makes what the generic proxy wrote (cp.async into shared memory) visible to the async proxy
// (wgmma operand reads) for this thread's following operations.
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// OR-reduction of `pred` over the `count` threads of named barrier `id`.
__device__ __forceinline__ bool BarrierOr(int id, int count, bool pred) {
  unsigned result;
  asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
               : "=r"(result)
               : "r"(static_cast<unsigned>(pred)), "r"(id), "r"(count)
               : "memory");
  return result != 0;
}

__device__ __forceinline__ void NamedBarrierSync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// A wgmma matrix descriptor in the 128-byte swizzle (bits 62-63 = 1): start address >> 4,
// leading byte offset >> 4 (bits 16-29), stride byte offset >> 4 (bits 32-45).
__device__ __forceinline__ unsigned long long Descriptor(unsigned address, unsigned lbo, unsigned sbo) {
  return static_cast<unsigned long long>((address & 0x3FFFF) >> 4) | (static_cast<unsigned long long>(lbo >> 4) << 16) |
         (static_cast<unsigned long long>(sbo >> 4) << 32) | (1ull << 62);
}

// The page-table entry of kv position `pos` for the staged page table, unchecked (ValidPage
// checks it a tile later): -1 past kv_len or past the table.
template <class S>
__device__ __forceinline__ int TableEntry(const KilnBatchPrefillParams& p, const KvSource& kv, int pos) {
  return pos < kv.len ? PageEntry<S>(p, kv.begin, pos) : -1;
}

// The producer's copies of one K or V tile (positions tile_start ..): thread `ptid` of the
// producer warpgroup takes chunk ptid % kChunksPerRow of rows ptid / kChunksPerRow + j *
// kRowsPerPass. kPageTable: `page_ids` (shared memory) holds the page of each of the tile's
// positions, and invalid pages were flagged when they were staged. Else returns whether one
// of its rows below kv_len had an invalid page (a page that holds the tile).
template <class S>
__device__ __forceinline__ bool LoadKvTile(const KilnBatchPrefillParams& p, const void* base, long long stride_token,
                                           long long stride_head, const KvSource& kv, int kv_head, int tile_start,
                                           unsigned dst, int ptid, const int* page_ids) {
  using T = typename S::T;
  const int chunk = ptid % S::kChunksPerRow;
  const int row0 = ptid / S::kChunksPerRow;
  const T* src_base = static_cast<const T*>(base);
  // Rows row0 + j * kRowsPerPass keep row % 8 (kRowsPerPass is a multiple of 8), so their
  // swizzled offsets are one offset plus j * kRowsPerPass rows of 128 bytes.
  static_assert(S::kRowsPerPass % 8 == 0, "passes keep the swizzle phase");
  const unsigned dst0 = dst + TileOffset(row0, chunk);
  bool bad = false;
  if constexpr (!S::kPaged || S::kPageHoldsTiles) {
    // One base pointer stepped by kRowsPerPass rows: ragged rows, or the rows of one page.
    const T* src;
    long long step;
    int limit = kv.len - tile_start;  // rows below this exist
    if constexpr (S::kPaged) {
      const int page = PageOf<S>(p, kv.begin, tile_start);
      bad = page < 0 && row0 < limit;
      if (page < 0) limit = 0;
      src = src_base + static_cast<long long>(page < 0 ? 0 : page) * stride_token +
            (static_cast<long long>((tile_start % S::kPageSize) + row0) * p.num_kv_heads + kv_head) * S::kHeadDim +
            chunk * 8;
      step = static_cast<long long>(S::kRowsPerPass) * p.num_kv_heads * S::kHeadDim;
    } else {
      src = src_base + (kv.begin + tile_start + row0) * stride_token + kv_head * stride_head + chunk * 8;
      step = S::kRowsPerPass * stride_token;
    }
#pragma unroll
    for (int j = 0; j < S::kKvPasses; ++j) {
      const bool valid = row0 + j * S::kRowsPerPass < limit;
      CpAsync16(dst0 + j * S::kRowsPerPass * 128, valid ? src : src_base, valid);
      src += step;
    }
  } else {
    // A page of at least kRowsPerPass positions holds kPassesPerPage of this thread's rows in a
    // row (tile_start is a multiple of the page size, row0 < kRowsPerPass): the page is read and
    // the address computed once a page, its other rows a fixed step on. The producer shares the
    // SM's issue slots with the consumers' softmax, so its per-row work is their time too.
    constexpr int kPassesPerPage = S::kPageSize >= S::kRowsPerPass ? S::kPageSize / S::kRowsPerPass : 1;
    constexpr int kPages = S::kKvPasses / kPassesPerPage < 1 ? 1 : S::kKvPasses / kPassesPerPage;
    constexpr int kPassesPerGroup = S::kKvPasses / kPages;  // kPassesPerPage, at most the tile's
    const long long step = static_cast<long long>(S::kRowsPerPass) * p.num_kv_heads * S::kHeadDim;
#pragma unroll
    for (int g = 0; g < kPages; ++g) {
      const int row = row0 + g * kPassesPerGroup * S::kRowsPerPass;
      const int pos = tile_start + row;
      const int page = page_ids[row];  // -1 past kv_len, or an invalid page (flagged when staged)
      const T* src = src_base;
      if (page >= 0)
        src = src_base + page * stride_token +
              (static_cast<long long>(pos % S::kPageSize) * p.num_kv_heads + kv_head) * S::kHeadDim + chunk * 8;
#pragma unroll
      for (int i = 0; i < kPassesPerGroup; ++i) {
        // The page's later rows may lie past kv_len (the request's last page).
        const bool valid = page >= 0 && pos + i * S::kRowsPerPass < kv.len;
        CpAsync16(dst0 + (g * kPassesPerGroup + i) * S::kRowsPerPass * 128, valid ? src + i * step : src_base, valid);
      }
    }
  }
  return bad;
}

// The online-softmax step of one consumer thread over its S fragment (wgmma m64n128 D layout:
// register 4n + 2h + e is row lane_row + 8h of the warp's 16, column 8n + 2 lane_col + e):
// masked where kMasked and the position is not visible, the running maxima m updated, the
// fragment replaced by P = 2^(logit - m) in fp32, the lane's partial sums l updated, and the
// rescale factor of O returned in alpha (O itself is rescaled by the caller).
template <class S, bool kMasked>
__device__ __forceinline__ void SoftmaxStep(const KilnBatchPrefillParams& p, float (&s)[S::kSRegs], float (&m)[2],
                                            float (&l)[2], float (&alpha)[2], const RowRange (&range)[2],
                                            int tile_start, bool check_pages, long long page_begin) {
  constexpr int kNTiles = kTileKv / 8;
  const float kNegInf = NegativeInfinity();
  const int lane_col = threadIdx.x % 4;
  // Without the soft cap the scale folds into the exponent's FMA (logit_scale > 0).
  const float scale = S::kSoftCap ? 1.f : p.logit_scale;
  unsigned bad_columns = 0;
  if constexpr (kMasked && S::kPaged) {
    if (check_pages) {
#pragma unroll 1
      for (int column = 0; column < 2 * kNTiles; ++column) {
        const int pos = tile_start + 8 * (column >> 1) + 2 * lane_col + (column & 1);
        if (PageOf<S>(p, page_begin, pos) < 0) bad_columns |= 1u << column;
      }
    }
  }
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[4 * n + e];
      if constexpr (S::kSoftCap) x = attention::Logit<S>(x, p.logit_scale, p.cap_scale);
      if constexpr (kMasked) {
        const int pos = tile_start + 8 * n + 2 * lane_col + (e & 1);
        const RowRange& rr = range[e >> 1];
        const bool visible = pos >= rr.lo && pos <= rr.hi && !((bad_columns >> (2 * n + (e & 1))) & 1u);
        if (!visible) x = kNegInf;
      }
      s[4 * n + e] = x;
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float tile_max = kNegInf;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) tile_max = fmaxf(tile_max, fmaxf(s[4 * n + 2 * i], s[4 * n + 2 * i + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float m_new = fmaxf(m[i], tile_max * scale);
    const float m_ref = m_new == kNegInf ? 0.f : m_new;
    alpha[i] = Exp2(m[i] - m_ref);
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      s[4 * n + 2 * i] = Exp2(fmaf(s[4 * n + 2 * i], scale, -m_ref));
      s[4 * n + 2 * i + 1] = Exp2(fmaf(s[4 * n + 2 * i + 1], scale, -m_ref));
      sum += s[4 * n + 2 * i] + s[4 * n + 2 * i + 1];
    }
    l[i] = l[i] * alpha[i] + sum;
    m[i] = m_new;
  }
}

template <class S>
__device__ __forceinline__ void RescaleO(float (&o)[S::kORegs], const float (&alpha)[2]) {
#pragma unroll
  for (int d = 0; d < S::kHeadDim / 8; ++d) {
    o[4 * d] *= alpha[0];
    o[4 * d + 1] *= alpha[0];
    o[4 * d + 2] *= alpha[1];
    o[4 * d + 3] *= alpha[1];
  }
}

// P (fp32 in the S fragment) rounded to T as the A operand of the PV k steps: k step kk is S's
// n tiles 2kk, 2kk + 1, whose D-fragment pairs are exactly the A fragment a0..a3.
template <class S>
__device__ __forceinline__ void ConvertP(const float (&s)[S::kSRegs], unsigned (&pf)[kTileKv / 16][4]) {
  using T = typename S::T;
#pragma unroll
  for (int kk = 0; kk < kTileKv / 16; ++kk) {
#pragma unroll
    for (int j = 0; j < 4; ++j) pf[kk][j] = PackPair<T>(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
  }
}

template <class S>
__device__ __forceinline__ void IssueQK(float (&s)[S::kSRegs], unsigned long long q_desc, unsigned long long k_desc) {
  using T = typename S::T;
#pragma unroll
  for (int ks = 0; ks < S::kHeadDim / 16; ++ks) {
    const unsigned long long offset = static_cast<unsigned long long>(((ks >> 2) * S::kColBlockBytes + (ks & 3) * 32) >>
                                                                      4);
    gemm::Wgmma<T, kTileKv>::Mma(s, q_desc + offset, k_desc + offset, ks > 0);
  }
}

template <class S>
__device__ __forceinline__ void IssuePV(float (&o)[S::kORegs], const unsigned (&pf)[kTileKv / 16][4],
                                        unsigned long long v_desc) {
  using T = typename S::T;
#pragma unroll
  for (int kk = 0; kk < kTileKv / 16; ++kk) {
    // 16 kv rows of 128 bytes per k step: two 1024-byte swizzle atoms.
    WgmmaRS<T, S::kHeadDim, 1>::Mma(o, pf[kk], v_desc + static_cast<unsigned long long>((kk * 16 * 128) >> 4), 1);
  }
}

// The producer with TMA (kv_tma): warp 0 alone walks the tiles. Ragged: lane 0 issues one TMA
// load per 64-column block of a K or V tile (a 3-D map: column, kv head, row). Paged, pages of
// kMinTmaPage positions and up: lane j < kTilePages looks up the tile's page j, and lanes issue
// one load per (page, column block) of a 4-D map (column, kv head, row in the page, page), an
// invalid page read at page coordinate total_kv: past the cache, zeros. Either way lane 0 first
// arrives on the stage's full barrier with the tile's bytes as expected transactions (and,
// paged, publishes the stage's invalid-page flag with that release).
//
// TMA fills only coordinates past the tensor with zeros, so the tile that crosses kv_len (a
// block's last, EdgeTile) is copied as the cp.async producer does, zeros past kv_len, by the
// warp's 32 threads standing in for 128: no other request's rows (ragged) or unowned slots of
// the last page (paged) enter the tile, not even as masked values (a NaN there would leak
// through P = 0). The copies are waited for before lane 0 arrives, and the consumers fence that
// tile for the async proxy. Warps 1-3 only copied Q: they end once those copies have landed.
__device__ __forceinline__ bool EdgeTile(const KvSource& kv, int tile_start) { return tile_start + kTileKv > kv.len; }

template <class S>
struct TmaShape {
  static constexpr int kColumnBlocks = S::kHeadDim / prefill::kPrefillTmaBoxColumns;
  // Paged: rows of one TMA box (a page's, at most a tile's) and the pages of a tile.
  static constexpr int kBoxRows = prefill::PrefillTmaBoxRows(S::kPaged ? S::kPageSize : 0);
  static constexpr int kTilePages = kTileKv / kBoxRows;
  static constexpr int kLoads = kTilePages * kColumnBlocks;  // TMA loads per K or V tile
  static_assert(!S::kTmaKv || kLoads <= 32, "a load per lane of one warp");
};

template <class S>
__device__ __forceinline__ void ProduceKvTma(const KilnBatchPrefillParams& p, Barriers* bars, const KvSource& kv,
                                             int kv_head, int first_tile, int num_tiles, unsigned char* smem,
                                             int* page_ids, int ptid) {
  using Tma = TmaShape<S>;
  if (ptid >= 32) {
    asm volatile("cp.async.wait_all;" ::: "memory");
    return;
  }
  const int lane = ptid;
  if (lane == 0) {
    gemm::TmaPrefetchDescriptor(&p.k_map);
    gemm::TmaPrefetchDescriptor(&p.v_map);
  }
  // K's stages, then V's, after the Q tile (the kernel's layout).
  unsigned char* const k_tiles = smem + S::kQBytes;
  unsigned char* const v_tiles = k_tiles + S::kStages * S::kKvBytes;
  // This lane's TMA load of a tile: page `load_page` of the tile, column block `load_block`.
  const int load_page = lane / Tma::kColumnBlocks;
  const int load_block = lane % Tma::kColumnBlocks;
  const int column = load_block * prefill::kPrefillTmaBoxColumns;
  const int box_bytes = load_block * S::kColBlockBytes + load_page * Tma::kBoxRows * 128;

  // Tile `tile_start` of K (map, base, strides) or V into `tile`, completing on `full`; `page`
  // (paged) is this lane's page of the tile (lanes < kTilePages), looked up once for K and V.
  auto load = [&](const prefill::KilnPrefillTensorMap& map, const void* base, long long stride_token,
                  long long stride_head, unsigned long long* full, unsigned char* tile, int tile_start, int page,
                  int stage, bool publish_bad) {
    if (!EdgeTile(kv, tile_start)) {
      if constexpr (S::kPaged) {
        const bool bad = __any_sync(0xffffffffu, lane < Tma::kTilePages && page < 0);
        const int load_id = __shfl_sync(0xffffffffu, page, load_page);
        if (lane == 0) {
          if (publish_bad) bars->stage_bad[stage] = bad ? 1 : 0;
          gemm::BarrierArriveExpectTx(full, S::kKvBytes);
        }
        __syncwarp();
        if (lane < Tma::kLoads) {
          // An invalid page: coordinate total_kv, past the cache (zeros; the flag masks it).
          const int page_coord = load_id >= 0 ? load_id : static_cast<int>(p.total_kv);
          const int row_in_page = S::kPageSize > kTileKv ? tile_start % S::kPageSize : 0;
          gemm::TmaLoad4d(tile + box_bytes, &map, full, column, kv_head, row_in_page, page_coord);
        }
      } else if (lane == 0) {
        gemm::BarrierArriveExpectTx(full, S::kKvBytes);
        const int row = static_cast<int>(kv.begin + tile_start);  // < total_kv <= INT_MAX (the host's check)
#pragma unroll
        for (int block = 0; block < Tma::kColumnBlocks; ++block)
          gemm::TmaLoad3d(tile + block * S::kColBlockBytes, &map, full, block * prefill::kPrefillTmaBoxColumns, kv_head,
                          row);
      }
      return;
    }
    bool bad = false;
    int* stage_pages = page_ids + stage * kTileKv;
    if constexpr (S::kPageTable) {
      // The cp.async copies read each position's page in shared memory (LoadKvTile).
#pragma unroll 1
      for (int i = lane; i < kTileKv; i += 32) {
        const int pos = tile_start + i;
        const int id = pos < kv.len ? PageOf<S>(p, kv.begin, pos) : -1;
        stage_pages[i] = id;
        bad |= pos < kv.len && id < 0;
      }
      __syncwarp();
    }
    const unsigned dst = SmemAddress(tile);
#pragma unroll 1
    for (int part = 0; part < 4; ++part)
      bad |= LoadKvTile<S>(p, base, stride_token, stride_head, kv, kv_head, tile_start, dst, lane + 32 * part,
                           stage_pages);
    bad = __any_sync(0xffffffffu, bad);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncwarp();
    if (lane == 0) {
      if (S::kPaged && publish_bad) bars->stage_bad[stage] = bad ? 1 : 0;
      BarrierArrive(full);
    }
  };
  for (int t = 0; t < num_tiles; ++t) {
    const int stage = t % S::kStages;
    const unsigned phase = (t / S::kStages) & 1;
    const int tile_start = first_tile + t * kTileKv;
    int page = -1;
    if constexpr (S::kPaged) {
      if (lane < Tma::kTilePages) page = PageOf<S>(p, kv.begin, tile_start + lane * Tma::kBoxRows);
    }
    BarrierWait(&bars->k_empty[stage], phase ^ 1);
    load(p.k_map, p.k, p.k_stride_token, p.k_stride_head, &bars->k_full[stage], k_tiles + stage * S::kKvBytes,
         tile_start, page, stage, true);
    BarrierWait(&bars->v_empty[stage], phase ^ 1);
    load(p.v_map, p.v, p.v_stride_token, p.v_stride_head, &bars->v_full[stage], v_tiles + stage * S::kKvBytes,
         tile_start, page, stage, false);
  }
}

}  // namespace detail

template <class S>
__device__ __forceinline__ void BatchPrefillSm90(const KilnBatchPrefillParams& p) {
  using T = typename S::T;
  using Pair = typename PairOf<T>::type;
  constexpr int kHeadDim = S::kHeadDim;
  constexpr int kGroup = S::kGroup;
  constexpr int kStages = S::kStages;
  const float kNegInf = detail::NegativeInfinity();

  // Heaviest items (the last row tiles of a request see the most positions) start first.
  const int item = gridDim.x - 1 - blockIdx.x;
  const int kv_head = blockIdx.y;

  detail::PrefillBlock block;
  if (!detail::LocatePrefillBlock<S, kTileRows, kTileKv>(p, item, block)) return;
  const long long q_begin = block.q_begin;
  const int q_len = block.q_len, rows = block.rows, row_begin = block.row_begin, chunks = block.chunks;
  const detail::KvSource kv = block.kv;
  const int first_tile = block.first_tile, num_tiles = block.num_tiles;
  const int window_left = p.window_left;

  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - SmemAddress(smem_raw) % 1024) % 1024);
  const unsigned q_smem = SmemAddress(smem);
  const unsigned k_smem = q_smem + S::kQBytes;
  const unsigned v_smem = k_smem + kStages * S::kKvBytes;
  detail::Barriers* bars = reinterpret_cast<detail::Barriers*>(smem + S::kQBytes + 2 * kStages * S::kKvBytes);
  int* page_ids = reinterpret_cast<int*>(smem + S::kQBytes + 2 * kStages * S::kKvBytes + S::kBarrierBytes);

  // K/V through TMA (ragged, or pages of kMinTmaPage and up; the host encoded k_map and v_map):
  // one producer thread arrives on a stage's full barrier, with the tile's bytes as the expected
  // transactions (and the edge tile's copies waited for).
  const bool kv_tma = S::kTmaKv && p.kv_tma != 0;
  if (threadIdx.x == 0) {
    detail::BarrierInit(&bars->q_full, 128);
    for (int s = 0; s < kStages; ++s) {
      detail::BarrierInit(&bars->k_full[s], kv_tma ? 1 : 128 + (S::kPaged ? 1 : 0));
      detail::BarrierInit(&bars->v_full[s], kv_tma ? 1 : 128);
      detail::BarrierInit(&bars->k_empty[s], kConsumers * 4);
      detail::BarrierInit(&bars->v_empty[s], kConsumers * 4);
    }
    gemm::FenceBarrierInit();
  }
  __syncthreads();

  const int warp_group = threadIdx.x / 128;
  if (warp_group == 0) {
    // ---- producer ----
    gemm::ReleaseRegisters<kProducerRegs>();
    const int ptid = threadIdx.x;
    {
      const int chunk_q = ptid % S::kChunksPerRow;
      const int row0 = ptid / S::kChunksPerRow;
      const T* q = static_cast<const T*>(p.q);
#pragma unroll
      for (int j = 0; j < S::kQPasses; ++j) {
        const int row = row0 + j * S::kRowsPerPass;
        const int r = row_begin + row;
        const bool valid = r < rows;
        const long long token = q_begin + r / kGroup;
        const long long head = static_cast<long long>(kv_head) * kGroup + r % kGroup;
        const T* src = valid ? q + token * p.q_stride_token + head * p.q_stride_head + chunk_q * 8 : q;
        detail::CpAsync16(q_smem + detail::TileOffset(row, chunk_q), src, valid);
      }
      detail::CpAsyncArriveNoinc(&bars->q_full);
    }
    if constexpr (S::kTmaKv) {
      if (kv_tma) {
        detail::ProduceKvTma<S>(p, bars, kv, kv_head, first_tile, num_tiles, smem, page_ids, ptid);
        return;
      }
    }
    // kPageTable: the page-table entry of position first_tile + t * kTileKv + ptid, loaded one
    // tile ahead and checked only when it is staged, so the load is in flight meanwhile.
    int next_entry = S::kPageTable && num_tiles > 0 ? detail::TableEntry<S>(p, kv, first_tile + ptid) : -1;
    for (int t = 0; t < num_tiles; ++t) {
      const int stage = t % kStages;
      const unsigned phase = (t / kStages) & 1;
      const int tile_start = first_tile + t * kTileKv;
      int* stage_pages = page_ids + stage * kTileKv;
      bool table_bad = false;
      if constexpr (S::kPageTable) {
        // Safe to overwrite: every producer thread read this stage's ids (tile t - kStages)
        // before it reached tile t - 1's barrier, which this thread has passed.
        const int page = detail::ValidPage(p, next_entry);
        stage_pages[ptid] = page;
        table_bad = tile_start + ptid < kv.len && page < 0;
        if (t + 1 < num_tiles) next_entry = detail::TableEntry<S>(p, kv, tile_start + kTileKv + ptid);
      }
      detail::BarrierWait(&bars->k_empty[stage], phase ^ 1);
      // kPageTable: the stage's ids visible to every producer thread, and whether one is bad.
      const bool table_any = S::kPageTable && detail::BarrierOr(1, 128, table_bad);
      const bool bad = detail::LoadKvTile<S>(p, p.k, p.k_stride_token, p.k_stride_head, kv, kv_head, tile_start,
                                             k_smem + stage * S::kKvBytes, ptid, stage_pages);
      detail::CpAsyncArriveNoinc(&bars->k_full[stage]);
      if constexpr (S::kPaged) {
        // The stage's invalid-page flag, published by one extra (release) arrival on k_full.
        const bool any = S::kPageTable ? table_any : detail::BarrierOr(1, 128, bad);
        if (ptid == 0) {
          bars->stage_bad[stage] = any ? 1 : 0;
          detail::BarrierArrive(&bars->k_full[stage]);
        }
      }
      detail::BarrierWait(&bars->v_empty[stage], phase ^ 1);
      detail::LoadKvTile<S>(p, p.v, p.v_stride_token, p.v_stride_head, kv, kv_head, tile_start,
                            v_smem + stage * S::kKvBytes, ptid, stage_pages);
      detail::CpAsyncArriveNoinc(&bars->v_full[stage]);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    return;
  }

  // ---- consumers: warpgroup wg owns rows 64 wg .. 64 wg + 63 of the tile ----
  gemm::ClaimRegisters<kConsumerRegs>();
  const int wg = warp_group - 1;
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int lane_row = lane / 4;
  const int lane_col = lane % 4;
  const bool warp_leader = lane == 0;
  const int warp_row = row_begin + 64 * wg + 16 * warp;  // request row of the warp's first row
  const bool warp_active = warp_row < rows;
  const int warp_last = max(min(warp_row + 15, rows - 1), warp_row);
  const detail::RowRange warp_first_range = detail::VisibleRange<S>(warp_row, kv.len, q_len, window_left);
  const detail::RowRange warp_last_range = detail::VisibleRange<S>(warp_last, kv.len, q_len, window_left);
  detail::RowRange range[2];
  range[0] = detail::VisibleRange<S>(warp_row + lane_row, kv.len, q_len, window_left);
  range[1] = detail::VisibleRange<S>(warp_row + lane_row + 8, kv.len, q_len, window_left);

  // Descriptors: Q (this warpgroup's 64 rows) and K K-major (SBO = 8 rows of 128 bytes); V
  // MN-major: LBO = the next 64 dims (a column block), SBO = the next 8 kv rows.
  const unsigned long long q_desc = detail::Descriptor(q_smem + wg * 64 * 128, 16, 1024);
  const unsigned v_lbo = S::kColBlockBytes;
  const unsigned v_sbo = 1024;

  float o[S::kORegs];
#pragma unroll
  for (int i = 0; i < S::kORegs; ++i) o[i] = 0.f;
  float s[S::kSRegs];
#pragma unroll
  for (int i = 0; i < S::kSRegs; ++i) s[i] = 0.f;
  unsigned pf[kTileKv / 16][4];
  float m[2] = {kNegInf, kNegInf};
  float l[2] = {0.f, 0.f};
  float alpha[2];

  detail::BarrierWait(&bars->q_full, 0);
  // Q came through cp.async (the generic proxy): one fence before any wgmma reads it. K/V tiles
  // need one each when cp.async wrote them: every tile without kv_tma, the edge tile with it.
  detail::FenceProxyAsync();
  const int first_fenced_tile = !kv_tma                                                        ? 0
                                : detail::EdgeTile(kv, first_tile + (num_tiles - 1) * kTileKv) ? num_tiles - 1
                                                                                               : num_tiles;
  auto fence_kv = [&](int t) {
    if (t >= first_fenced_tile) detail::FenceProxyAsync();
  };

  // Waits for tile t's K and issues S = Q K^T (one wgmma group).
  auto qk_softmax_issue = [&](int t) {
    const int stage = t % kStages;
    const unsigned phase = (t / kStages) & 1;
    detail::BarrierWait(&bars->k_full[stage], phase);
    fence_kv(t);
    gemm::FenceAccumulators(s);
    gemm::WgmmaFence();
    detail::IssueQK<S>(s, q_desc, detail::Descriptor(k_smem + stage * S::kKvBytes, 16, 1024));
    gemm::WgmmaCommit();
  };
  // Overlapped step: waits for K of tile t and V of tile t - 1 first, so that the one proxy
  // fence comes before any wgmma of the step is in flight, then issues S = Q K_t^T and
  // O += P V_{t-1} as two groups.
  auto qk_pv_issue = [&](int t) {
    const int k_stage = t % kStages;
    const int v_stage = (t - 1) % kStages;
    detail::BarrierWait(&bars->k_full[k_stage], (t / kStages) & 1);
    detail::BarrierWait(&bars->v_full[v_stage], ((t - 1) / kStages) & 1);
    fence_kv(t);  // tile t - 1 is never the edge tile (only a block's last tile can be)
    gemm::FenceAccumulators(s);
    gemm::FenceAccumulators(o);
    gemm::WgmmaFence();
    detail::IssueQK<S>(s, q_desc, detail::Descriptor(k_smem + k_stage * S::kKvBytes, 16, 1024));
    gemm::WgmmaCommit();
    detail::IssuePV<S>(o, pf, detail::Descriptor(v_smem + v_stage * S::kKvBytes, v_lbo, v_sbo));
    gemm::WgmmaCommit();
  };
  auto tile_bad_of = [&](int t) -> bool {
    if constexpr (S::kPaged) return bars->stage_bad[t % kStages] != 0;
    return false;
  };
  auto softmax = [&](int t, bool tile_bad) {
    const int tile_start = first_tile + t * kTileKv;
    const int tile_last = tile_start + kTileKv - 1;
    const bool full = !tile_bad && warp_active && tile_start >= warp_last_range.lo && tile_last <= warp_first_range.hi;
    if (full) {
      detail::SoftmaxStep<S, false>(p, s, m, l, alpha, range, tile_start, false, kv.begin);
    } else {
      detail::SoftmaxStep<S, true>(p, s, m, l, alpha, range, tile_start, tile_bad, kv.begin);
    }
  };
  auto pv_issue = [&](int t) {
    const int stage = t % kStages;
    const unsigned phase = (t / kStages) & 1;
    detail::BarrierWait(&bars->v_full[stage], phase);
    fence_kv(t);
    gemm::FenceAccumulators(o);
    gemm::WgmmaFence();
    detail::IssuePV<S>(o, pf, detail::Descriptor(v_smem + stage * S::kKvBytes, v_lbo, v_sbo));
    gemm::WgmmaCommit();
  };

  if constexpr (!S::kOverlap) {
    for (int t = 0; t < num_tiles; ++t) {
      qk_softmax_issue(t);
      const bool tile_bad = tile_bad_of(t);  // read before K's stage is released
      gemm::WgmmaWait<0>();
      gemm::FenceAccumulators(s);
      if (warp_leader) detail::BarrierArrive(&bars->k_empty[t % kStages]);
      softmax(t, tile_bad);
      detail::RescaleO<S>(o, alpha);
      detail::ConvertP<S>(s, pf);
      pv_issue(t);
      gemm::WgmmaWait<0>();
      gemm::FenceAccumulators(o);
      if (warp_leader) detail::BarrierArrive(&bars->v_empty[t % kStages]);
    }
  } else if (num_tiles > 0) {
    // Ping-pong: warpgroup wg waits on named barrier 4 + wg before it issues a batch of
    // wgmmas and then arrives on the other's; warpgroup 1 lets warpgroup 0 go first. Each
    // issues num_tiles + 1 batches; warpgroup 0 takes the one arrival left over at the end.
    auto turn_wait = [&]() {
      if constexpr (S::kPingpong) asm volatile("bar.sync %0, 256;" ::"r"(4 + wg) : "memory");
    };
    auto turn_pass = [&]() {
      if constexpr (S::kPingpong) asm volatile("bar.arrive %0, 256;" ::"r"(5 - wg) : "memory");
    };
    if constexpr (S::kPingpong) {
      if (wg == 1) asm volatile("bar.arrive 4, 256;" ::: "memory");
    }
    turn_wait();
    qk_softmax_issue(0);
    turn_pass();
    {
      const bool tile_bad = tile_bad_of(0);
      gemm::WgmmaWait<0>();
      gemm::FenceAccumulators(s);
      if (warp_leader) detail::BarrierArrive(&bars->k_empty[0]);
      softmax(0, tile_bad);
      detail::ConvertP<S>(s, pf);  // O is zero: no rescale
    }
    for (int t = 1; t < num_tiles; ++t) {
      turn_wait();
      qk_pv_issue(t);
      turn_pass();
      const bool tile_bad = tile_bad_of(t);
      gemm::WgmmaWait<1>();  // S of tile t is done; PV of t - 1 may still run
      gemm::FenceAccumulators(s);
      if (warp_leader) detail::BarrierArrive(&bars->k_empty[t % kStages]);
      softmax(t, tile_bad);
      gemm::WgmmaWait<0>();
      gemm::FenceAccumulators(o);
      if (warp_leader) detail::BarrierArrive(&bars->v_empty[(t - 1) % kStages]);
      // Once the row maxima settle most tiles leave them unchanged (alpha == 1 everywhere).
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) detail::RescaleO<S>(o, alpha);
      detail::ConvertP<S>(s, pf);
    }
    turn_wait();
    pv_issue(num_tiles - 1);
    turn_pass();
    gemm::WgmmaWait<0>();
    gemm::FenceAccumulators(o);
    if (warp_leader) detail::BarrierArrive(&bars->v_empty[(num_tiles - 1) % kStages]);
    if constexpr (S::kPingpong) {
      if (wg == 0) turn_wait();
    }
  }

  // ---- epilogue ----
  float inv[2], lse2[2];
  prefill::detail::FinishRows(m, l, inv, lse2);
  const int head_base = kv_head * kGroup;

  if (chunks > 1) {
    if (!warp_active) return;
    const long long slot0 = (static_cast<long long>(item) * p.num_kv_heads + kv_head) * kTileRows + 64 * wg + 16 * warp;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int rr = lane_row + 8 * i;
      if (warp_row + rr >= rows) continue;
      float* part = p.partial_out + (slot0 + rr) * kHeadDim + 2 * lane_col;
#pragma unroll
      for (int d = 0; d < kHeadDim / 8; ++d) {
        *reinterpret_cast<float2*>(part + 8 * d) = make_float2(o[4 * d + 2 * i] * inv[i],
                                                               o[4 * d + 2 * i + 1] * inv[i]);
      }
      if (lane_col == 0) p.partial_lse[slot0 + rr] = lse2[i];
    }
    return;
  }

  // out: this warpgroup's 64 rows rounded to T into its own rows of the Q tile (only its own
  // wgmmas read them, and they are complete), then 16-byte stores of whole row chunks.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = 64 * wg + 16 * warp + lane_row + 8 * i;
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; ++d) {
      *reinterpret_cast<Pair*>(smem + detail::TileOffset(row, d) + 4 * lane_col) = FromFloat2<Pair>(
          o[4 * d + 2 * i] * inv[i], o[4 * d + 2 * i + 1] * inv[i]);
    }
  }
  detail::NamedBarrierSync(2 + wg, 128);
  T* out = static_cast<T*>(p.out);
  const int wg_row = row_begin + 64 * wg;
#pragma unroll 4
  for (int index = tid; index < 64 * S::kChunksPerRow; index += 128) {
    const int rr = index / S::kChunksPerRow;
    const int ch = index % S::kChunksPerRow;
    const int r = wg_row + rr;
    if (r >= rows) break;
    const long long token = q_begin + r / kGroup;
    const long long head = head_base + r % kGroup;
    const uint4 value = *reinterpret_cast<const uint4*>(smem + detail::TileOffset(64 * wg + rr, ch));
    *reinterpret_cast<uint4*>(out + token * p.out_stride_token + head * p.out_stride_head + ch * 8) = value;
  }
  if (p.lse != nullptr && lane_col == 0 && warp_active) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = warp_row + lane_row + 8 * i;
      if (r >= rows) continue;
      const long long token = q_begin + r / kGroup;
      p.lse[token * p.lse_stride_token + head_base + r % kGroup] = lse2[i] * detail::kLn2;
    }
  }
}

}  // namespace prefill_sm90
}  // namespace kiln
