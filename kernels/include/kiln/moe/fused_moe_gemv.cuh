// The device code of fused_moe's decode path (kiln/moe/moe_contract.h, FusedMoeGemvParams;
// docs/kernels-moe.md, "The decode path"): the two expert products of a layer as GEMVs over the
// slots of each chosen expert, with no permutation, no gather and no tensor-core tile of 64 rows
// for one row of data.
//
//   gate_up  act[s, c] = silu(w13[e, c] . x[s / top_k]) * (w13[e, c + I] . x[s / top_k])
//   down     y[s, h]   = w2[e, h] . act[s]
//
// At decode a layer reads each chosen expert's weights and little else, so what matters is how
// many weight bytes are in flight: a block takes one chosen expert (blockIdx.y-th in id order)
// and kGemvWeightRows weight rows per warp (kGemvBlocksPerSm blocks an SM); each lane keeps
// kGemvUnroll 16-byte loads of each of its warp's rows in flight (ld.global.nc.L1::no_allocate:
// read once, kept out of L1 so that the slots' input rows stay there), and multiplies them with
// the slots of the expert, kGemvPasses slots per pass over the rows (a further pass reads the
// rows again: from L2 where they are still there, else from memory; fused_moe's path rule keeps
// such calls few). Partial sums are in fp32 per lane and added across the warp by a fixed
// butterfly: the result does not depend on timing. Output values are rounded once to T, as the
// grouped path's epilogues round theirs.
//
// The prologue (FindExpertSlots) finds the block's expert and its slots from topk_ids alone, in
// shared memory: the ids (an id outside [0, E) is no row), the first slot of each expert (shared
// atomicMin: order-free), the chosen experts ranked by id with a ballot per warp, then the
// expert's slots in ascending order (a ballot per 32 slots and a prefix over those counts). Every
// barrier is reached by every thread: the loops before them have block-uniform trip counts.
#pragma once

#include "kiln/common/grid_dependency.cuh"
#include "kiln/common/numeric.cuh"
#include "kiln/common/stream_dot.cuh"
#include "kiln/moe/moe_contract.h"
#include "kiln/moe/moe_unpermute.cuh"

namespace kiln {
namespace moe {

// 16-byte loads of each weight row a lane keeps in flight: 4 rows x 2 = 128 bytes a lane, 32 KiB
// a block, enough across the blocks an SM holds to cover the memory latency at full bandwidth.
constexpr int kGemvUnroll = 2;
// Slots multiplied per pass over the weight rows (the accumulators: kGemvWeightRows x this). Two,
// so that kGemvBlocksPerSm blocks fit an SM without spills (four slots a pass took 122 registers:
// two blocks an SM, and the prologue's latency showed at small experts).
constexpr int kGemvPasses = 2;
constexpr int kGemvNoSlot = 0x7fffffff;
static_assert(kGemvPasses == 2, "ExpertGemv dispatches passes of 2 and 1 slots");

static_assert(kMaxExperts <= kGemvBlock, "a thread per expert ranks the chosen experts");
static_assert(kMaxGemvSlots % 32 == 0, "slots are ranked 32 at a time");

struct GemvShared {
  int ids[kMaxGemvSlots];    // slot -> its expert, -1 for no row
  int first[kMaxExperts];    // expert -> its first slot, kGemvNoSlot if none chose it
  int slots[kMaxGemvSlots];  // the block's expert's slots, ascending
  int chunk_counts[kMaxGemvSlots / 32];
  int warp_counts[kGemvWarps];
  int expert;
  int count;
};

__device__ __forceinline__ unsigned LowerLanes(int lane) { return (1u << lane) - 1u; }

// The block's expert (block-uniform), or -1 when fewer experts were chosen than its rank; its
// slots are sh.slots[0 .. sh.count). The rank is blockIdx.y, and the first block of gate_up also
// writes slot_to_row for the combine (every slot: s, or -1 without a row); kOneGrid: the rank is
// `one_grid_rank` (the block's ticket's) and no block writes slot_to_row (the preparing one does).
template <bool kOneGrid = false>
__device__ __forceinline__ int FindExpertSlots(const FusedMoeGemvParams& p, GemvShared& sh, int one_grid_rank = 0) {
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int slots = static_cast<int>(p.tokens) * p.top_k;  // <= kMaxGemvSlots (host-checked)
  const bool write_rows = !kOneGrid && p.slot_to_row != nullptr && blockIdx.x == 0 && blockIdx.y == 0;
  if (tid < p.experts) sh.first[tid] = kGemvNoSlot;
  if (tid == 0) sh.expert = -1;
  for (int s = tid; s < slots; s += kGemvBlock) {
    const int t = s / p.top_k;
    // From L2 (ld.global.cg): the down GEMV reads the ids before its dependency wait, and the
    // kernel that wrote them completed before the gate-up GEMV's wait returned; L2 is where
    // their values are sure to be.
    const int id = __ldcg(p.topk_ids + t * p.ids_stride + (s - t * p.top_k));
    const bool valid = id >= 0 && id < p.experts;
    sh.ids[s] = valid ? id : -1;
    if (write_rows) p.slot_to_row[s] = valid ? s : -1;
  }
  __syncthreads();
  for (int s = tid; s < slots; s += kGemvBlock)
    if (sh.ids[s] >= 0) atomicMin(&sh.first[sh.ids[s]], s);
  __syncthreads();
  // Expert tid's rank among the chosen ones, by id.
  const bool chosen = tid < p.experts && sh.first[tid] != kGemvNoSlot;
  const unsigned chosen_lanes = __ballot_sync(0xffffffffu, chosen);
  if (lane == 0) sh.warp_counts[warp] = __popc(chosen_lanes);
  __syncthreads();
  int rank = __popc(chosen_lanes & LowerLanes(lane));
  for (int w = 0; w < warp; ++w) rank += sh.warp_counts[w];
  if (chosen && rank == (kOneGrid ? one_grid_rank : static_cast<int>(blockIdx.y))) sh.expert = tid;
  __syncthreads();
  const int e = sh.expert;
  if (e < 0) return -1;
  // The expert's slots in order: counts per 32 slots, then each slot's place.
  const int chunks = (slots + 31) / 32;
  for (int c = warp; c < chunks; c += kGemvWarps) {
    const int s = 32 * c + lane;
    const unsigned mine = __ballot_sync(0xffffffffu, s < slots && sh.ids[s] == e);
    if (lane == 0) sh.chunk_counts[c] = __popc(mine);
  }
  __syncthreads();
  for (int c = warp; c < chunks; c += kGemvWarps) {
    const int s = 32 * c + lane;
    const bool is_mine = s < slots && sh.ids[s] == e;
    const unsigned mine = __ballot_sync(0xffffffffu, is_mine);
    int base = 0;
    for (int q = 0; q < c; ++q) base += sh.chunk_counts[q];
    if (is_mine) sh.slots[base + __popc(mine & LowerLanes(lane))] = s;
  }
  if (tid == 0) {
    int total = 0;
    for (int q = 0; q < chunks; ++q) total += sh.chunk_counts[q];
    sh.count = total;
  }
  __syncthreads();
  return e;
}

// One pass: the warp's kGemvWeightRows weight rows `w` times the input rows of R slots. The input
// rows come through the read-only path (ld.global.nc), or from L2 (ld.global.cg) with
// kInWrittenInGrid: act that other blocks of the same grid wrote (the one-grid form), which the
// non-coherent path must not read.
template <typename T, bool kGateUp, int R, bool kInWrittenInGrid = false>
__device__ __forceinline__ void GemvPass(const FusedMoeGemvParams& p, const char* const (&w)[kGemvWeightRows],
                                         const int* slots, int col0, int lane) {
  const char* in[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const long long row = kGateUp ? slots[r] / p.top_k : slots[r];
    in[r] = static_cast<const char*>(p.in) + row * p.in_stride * static_cast<long long>(sizeof(T));
  }
  float acc[kGemvWeightRows][R];
#pragma unroll
  for (int i = 0; i < kGemvWeightRows; ++i)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = 0.0f;
  const int chunks = p.k / 8;  // 16-byte units of a row
  for (int c0 = lane; c0 < chunks; c0 += 32 * kGemvUnroll) {
    uint4 wv[kGemvUnroll][kGemvWeightRows];
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const int c = c0 + 32 * u;
      if (c < chunks) {
#pragma unroll
        for (int i = 0; i < kGemvWeightRows; ++i) wv[u][i] = LoadStreamed(w[i] + 16LL * c);
      }
    }
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const int c = c0 + 32 * u;
      if (c < chunks) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const uint4* unit = reinterpret_cast<const uint4*>(in[r] + 16LL * c);
          const uint4 xv = kInWrittenInGrid ? __ldcg(unit) : __ldg(unit);
#pragma unroll
          for (int i = 0; i < kGemvWeightRows; ++i) Dot8<T>(acc[i][r], wv[u][i], xv);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kGemvWeightRows; ++i)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = GemvWarpSum(acc[i][r]);
  using P = typename PairOf<T>::type;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (lane != r) continue;  // lane r writes slot r's columns
    T* out = static_cast<T*>(p.out) + static_cast<long long>(slots[r]) * p.out_stride + col0;
    if constexpr (kGateUp) {
      // Columns col0 and col0 + 1: gate rows 0 and 1, up rows 2 and 3. silu(x) = x / (1 + exp(-x)):
      // activation::Silu's formula, as the grouped path's epilogue.
      const float v0 = __fdividef(acc[0][r], 1.0f + __expf(-acc[0][r])) * acc[2][r];
      const float v1 = __fdividef(acc[1][r], 1.0f + __expf(-acc[1][r])) * acc[3][r];
      *reinterpret_cast<P*>(out) = FromFloat2<P>(v0, v1);
    } else {
      P* pairs = reinterpret_cast<P*>(out);
      pairs[0] = FromFloat2<P>(acc[0][r], acc[1][r]);
      pairs[1] = FromFloat2<P>(acc[2][r], acc[3][r]);
    }
  }
}

// Asks L2 for the first `bytes` of a weight row (PTX ISA, "cp.async.bulk.prefetch", sm_90): the
// down GEMV's blocks, started early by a programmatic launch, fetch while the gate-up GEMV ends.
__device__ __forceinline__ void PrefetchRowToL2(const void* row, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row), "r"(bytes) : "memory");
#endif
}

// The most of each of its weight rows a down block prefetches before its dependency wait: 32
// rows x 2 KiB = 64 KiB a block, 25 MB for every block the SMs can hold at once (132 SMs x
// kGemvBlocksPerSm), half of the H200's L2.
constexpr int kGemvPrefetchBytes = 2048;

// How much of each of its w2 rows a down block asks L2 for: the row (a multiple of 16 bytes), at
// most kGemvPrefetchBytes.
template <typename T>
__device__ __forceinline__ unsigned DownPrefetchBytes(const FusedMoeGemvParams& p) {
  const unsigned row_bytes = static_cast<unsigned>(p.k) * sizeof(T);
  return row_bytes < kGemvPrefetchBytes ? row_bytes : kGemvPrefetchBytes;
}

// The warp's first output column in column block `block_x` (kGemvGateUpColumns of act or
// kGemvDownColumns of y a block).
template <bool kGateUp>
__device__ __forceinline__ int WarpFirstColumn(int block_x, int warp) {
  constexpr int kWarpColumns = kGateUp ? kGemvWeightRows / 2 : kGemvWeightRows;
  constexpr int kColumns = kGemvWarps * kWarpColumns;
  static_assert(kColumns == (kGateUp ? kGemvGateUpColumns : kGemvDownColumns), "the contract's columns");
  return block_x * kColumns + warp * kWarpColumns;
}

// The warp's kGemvWeightRows weight rows of expert e from column col0 (any valid expert where the
// warp has no work): gate_up's gate rows col0, col0 + 1, then their up rows n further; down's
// rows col0 .. col0 + 3.
template <typename T, bool kGateUp>
__device__ __forceinline__ void WarpWeightRows(const FusedMoeGemvParams& p, int e, int col0,
                                               const char* (&w)[kGemvWeightRows]) {
  const char* expert = static_cast<const char*>(p.weight) +
                       static_cast<long long>(e) * p.weight_expert_stride * static_cast<long long>(sizeof(T));
#pragma unroll
  for (int i = 0; i < kGemvWeightRows; ++i) {
    const int row = kGateUp ? col0 + (i & 1) + (i >> 1) * p.n : col0 + i;
    w[i] = expert + static_cast<long long>(row) * p.weight_row_stride * static_cast<long long>(sizeof(T));
  }
}

// Every slot of the block's expert (sh.slots[0 .. sh.count)) times the warp's weight rows `w`,
// kGemvPasses slots a pass.
template <typename T, bool kGateUp, bool kInWrittenInGrid = false>
__device__ __forceinline__ void ExpertPasses(const FusedMoeGemvParams& p, const GemvShared& sh,
                                             const char* const (&w)[kGemvWeightRows], int col0, int lane) {
  const int count = sh.count;
  for (int first = 0; first < count; first += kGemvPasses) {
    const int* slots = sh.slots + first;
    if (count - first >= 2) GemvPass<T, kGateUp, 2, kInWrittenInGrid>(p, w, slots, col0, lane);
    else GemvPass<T, kGateUp, 1, kInWrittenInGrid>(p, w, slots, col0, lane);
  }
}

// The block (columns blockIdx.x * kColumns .., expert of rank blockIdx.y): a warp's columns, for
// every slot of the expert, kGemvPasses at a time.
//
// Programmatic dependent launch (fused_moe launches the two GEMVs and the combine with it; the
// kernels are correct launched either way): the gate-up GEMV waits for the kernels before it
// first of all (it reads their ids and x, and writes what an earlier call's combine may still
// read), then lets the down GEMV be scheduled; the down GEMV finds its expert and slots (the ids
// were final before the gate-up GEMV's wait returned), prefetches the start of its weight rows,
// lets the combine be scheduled, and waits (every thread) before it reads the activations or
// writes y.
//
// kZeroArrivals (gate_up of the folded path): the first block also zeroes the down GEMV's
// arrival counters, after its wait (the previous call's down GEMV has completed) and before
// anything can return early (a call whose ids are all dropped still needs them).
template <typename T, bool kGateUp, bool kZeroArrivals = false>
__device__ __forceinline__ void ExpertGemv(const FusedMoeGemvParams& p, const FusedMoeFoldParams* fold = nullptr) {
  static_assert(sizeof(T) == 2, "fused_moe's element types are 16-bit");
  static_assert(kGateUp || !kZeroArrivals, "the gate-up GEMV zeroes the down GEMV's counters");
  __shared__ GemvShared sh;
  if constexpr (kGateUp) {
    GridDependencyWait();
    GridDependencyLaunchDependents();
    if constexpr (kZeroArrivals) {
      if (blockIdx.x == 0 && blockIdx.y == 0)
        for (int i = static_cast<int>(threadIdx.x); i < fold->arrival_count; i += kGemvBlock) fold->arrivals[i] = 0u;
    }
  }
  const int e = FindExpertSlots(p, sh);
  if constexpr (!kGateUp) GridDependencyLaunchDependents();
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int col0 = WarpFirstColumn<kGateUp>(static_cast<int>(blockIdx.x), warp);
  // n is a multiple of 8 and a warp's columns (2 or 4) divide 8: a warp's columns are all in or all out.
  const bool works = e >= 0 && col0 < p.n;
  const char* w[kGemvWeightRows];
  WarpWeightRows<T, kGateUp>(p, works ? e : 0, col0, w);
  if constexpr (!kGateUp) {
    if (works) {
      const unsigned prefetch = DownPrefetchBytes<T>(p);
#pragma unroll
      for (int i = 0; i < kGemvWeightRows; ++i)
        if (lane == i) PrefetchRowToL2(w[i], prefetch);
    }
    // Every thread waits, those with no work too: the combine's wait covers only this grid, so
    // this grid must not complete before the gate-up GEMV has (it writes slot_to_row, which the
    // combine reads, even when every id is dropped and no block here has work).
    GridDependencyWait();
  }
  if (!works) return;
  ExpertPasses<T, kGateUp>(p, sh, w, col0, lane);
}

// ---- The folded path's down GEMV: y, then the combine by the block that arrives last ----------

// out[t, col .. col + 7] = sum over j of topk_weights[t, j] * y[t * top_k + j, col .. col + 7]
// over the slots with an id in [0, E), in fp32 in the order of j, rounded once: moe_unpermute's
// arithmetic (UnpermuteUnits with 16-byte units, the same fused multiply-adds in the same
// order), so the folded and the separate combine give the same bits. y is read from L2
// (ld.global.cg): other SMs wrote it during this grid.
template <typename T>
__device__ __forceinline__ void CombineUnit(const FusedMoeGemvParams& p, const FusedMoeFoldParams& f,
                                            const GemvShared& sh, long long t, int col) {
  float acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
  const char* y = static_cast<const char*>(p.out) + static_cast<long long>(col) * sizeof(T);
  const int* ids = sh.ids + t * p.top_k;
  const float* weights = f.topk_weights + t * f.weights_stride;
  for (int j0 = 0; j0 < p.top_k; j0 += kUnpermuteBatch) {
    uint4 loaded[kUnpermuteBatch];
#pragma unroll
    for (int k = 0; k < kUnpermuteBatch; ++k) {
      const int j = j0 + k;
      if (j < p.top_k && ids[j] >= 0) {
        const long long slot = t * p.top_k + j;
        loaded[k] = __ldcg(reinterpret_cast<const uint4*>(y + slot * p.out_stride * static_cast<long long>(sizeof(T))));
      }
    }
#pragma unroll
    for (int k = 0; k < kUnpermuteBatch; ++k) {
      const int j = j0 + k;
      if (j < p.top_k && ids[j] >= 0) AccumulateUnit<T, 8>(acc, __ldg(weights + j), loaded[k]);
    }
  }
  uint4 result;
  T* elems = reinterpret_cast<T*>(&result);
#pragma unroll
  for (int i = 0; i < 8; ++i) elems[i] = FromFloat<T>(acc[i]);
  char* out = static_cast<char*>(f.out) + (t * f.out_stride + col) * static_cast<long long>(sizeof(T));
  *reinterpret_cast<uint4*>(out) = result;
}

// Every block of the grid calls it once, every thread (it has barriers), after its y stores.
// The block's arrival at its columns (blockIdx.x) is counted once its stores are visible to the
// whole device (each thread's fence, then the barrier, then one atomic add); the block whose add
// makes the count gridDim.y (every expert block of those columns, with work or not) is the
// last, fences again so that its reads come after what the count showed, and combines every
// token's row at its columns. Which block is last depends on timing; what it computes does not.
// (The counter pattern: CUDA C++ Programming Guide, "Memory Fence Functions".)
template <typename T>
__device__ __forceinline__ void CombineWhenLast(const FusedMoeGemvParams& p, const FusedMoeFoldParams& f,
                                                const GemvShared& sh, int& last, int block_col0) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(f.arrivals + blockIdx.x, 1u) == gridDim.y - 1u;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int units = f.column_groups * (kGemvDownColumns / 8);  // 16-byte units of the block's columns
  const long long items = p.tokens * units;
  for (long long i = threadIdx.x; i < items; i += kGemvBlock) {
    const long long t = i / units;
    const int col = block_col0 + static_cast<int>(i - t * units) * 8;
    if (col < p.n) CombineUnit<T>(p, f, sh, t, col);  // n is a multiple of 8: a unit is all in or all out
  }
}

// kiln_fused_moe_down_folded's block: column groups blockIdx.x * column_groups .. (each
// kGemvDownColumns wide: a warp's kGemvWeightRows rows of w2 in each) of the expert of rank
// blockIdx.y, for every slot of the expert; then CombineWhenLast. The dependency protocol is the
// down GEMV's (ExpertGemv): find the expert and slots, let the next kernel be scheduled, ask L2
// for the start of every weight row of every group, wait (every thread), compute. No thread
// returns before CombineWhenLast's barriers.
template <typename T>
__device__ __forceinline__ void FoldedDownGemv(const FusedMoeGemvParams& p, const FusedMoeFoldParams& f) {
  static_assert(sizeof(T) == 2, "fused_moe's element types are 16-bit");
  __shared__ GemvShared sh;
  __shared__ int last;
  const int e = FindExpertSlots(p, sh);
  GridDependencyLaunchDependents();
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int groups = f.column_groups;
  const int block_col0 = static_cast<int>(blockIdx.x) * groups * kGemvDownColumns;
  const char* expert = static_cast<const char*>(p.weight) + static_cast<long long>(e >= 0 ? e : 0) *
                                                                p.weight_expert_stride *
                                                                static_cast<long long>(sizeof(T));
  const long long row_bytes = p.weight_row_stride * static_cast<long long>(sizeof(T));
  if (e >= 0) {
    const unsigned prefetch = DownPrefetchBytes<T>(p);
    for (int g = 0; g < groups; ++g) {
      const int col0 = block_col0 + g * kGemvDownColumns + warp * kGemvWeightRows;
      if (col0 < p.n && lane < kGemvWeightRows) PrefetchRowToL2(expert + (col0 + lane) * row_bytes, prefetch);
    }
  }
  GridDependencyWait();
  if (e >= 0) {
    for (int g = 0; g < groups; ++g) {
      // n is a multiple of 8 and a warp's 4 columns divide 8: a warp's columns are all in or all out.
      const int col0 = block_col0 + g * kGemvDownColumns + warp * kGemvWeightRows;
      if (col0 >= p.n) continue;
      const char* w[kGemvWeightRows];
#pragma unroll
      for (int i = 0; i < kGemvWeightRows; ++i) w[i] = expert + (col0 + i) * row_bytes;
      ExpertPasses<T, false>(p, sh, w, col0, lane);
    }
  }
  CombineWhenLast<T>(p, f, sh, last, block_col0);
}

}  // namespace moe
}  // namespace kiln
