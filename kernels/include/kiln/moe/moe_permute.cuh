// The device code of moe_permute (kiln/moe/moe_contract.h, docs/kernels-moe.md): token -> expert
// assignments (topk_ids [T, top_k]) to the contiguous grouped layout of grouped_gemm.
//
//   slot s = t * top_k + j, e = topk_ids[t, j]; a slot with e outside [0, E) has no row
//   expert_counts[e]  the slots of expert e
//   m_indptr          m_indptr[0] = 0, m_indptr[e + 1] = m_indptr[e] + roundup(counts[e], align)
//   row_to_slot[r]    the slot of row r: group e's slots in ascending slot order from row
//                     m_indptr[e] (stable), then -1 up to m_indptr[e + 1] (padding); -1 from
//                     m_indptr[E] to the end of row_to_slot
//   slot_to_row[t, j] the inverse: the row of slot s, -1 for a slot without a row
//
// PermuteBlock is the whole op in one block of kPermuteWarps warps (one launch, no workspace, no
// host sync, so a CUDA graph can capture it):
//   1. histogram: each warp's lanes with equal ids are found with __match_any_sync (PTX
//      match.any.sync.b32, sm_70+: the mask of the lanes holding the same value), and the
//      lowest of them adds their number to the shared counter: one shared atomic per expert
//      present in the warp, so "every token to one expert" costs what a spread costs;
//   2. one warp scans the aligned counts (each lane max_experts / 32 experts, then a shuffle
//      scan) into m_indptr and writes expert_counts;
//   3. padding rows and the rows after m_indptr[E] get -1 (they are never ranked into);
//   4. ranks in rounds of kPermuteBlock slots, in slot order: a slot's row is
//        m_indptr[e] + (e's slots of earlier rounds) + (e's slots in earlier warps of this
//        round) + (e's slots in earlier lanes of its warp)
//      the last from the match mask (popc of the lower lanes), the middle from a scan over the
//      warps of the per-warp counts (thread e sums column e of warp_counts), the first a
//      running total per expert. Slots keep their order inside an expert: stable, and the
//      result depends on the ids only (no atomics race for positions): deterministic.
//
// __syncthreads orders shared and global accesses among the block's threads (CUDA C++
// Programming Guide, "Synchronization functions": accesses before it are visible to all the
// block's threads after it); __syncwarp does the same among a warp's lanes. Every loop that
// reaches a barrier or a *_sync intrinsic runs the same trip count on every thread (its bound
// depends on block-uniform values only); slots past the end take id -1 instead of leaving.
//
// Ids are loaded kLoadsAhead rounds at a time, so that many loads per thread are in flight
// before the first is used: one round's work is short next to a global load's latency.
//
// GatherRow: one warp per permuted row, unit_bytes per lane and access (the widest unit the
// host found dividing every offset: 16-byte vectors for every bf16/fp16 hidden size that is a
// multiple of 8 on aligned rows); padding rows are written as zeros so the grouped GEMM reads
// finite values there.
#pragma once

#include "kiln/moe/moe_contract.h"

namespace kiln {
namespace moe {

constexpr unsigned kPermuteFullWarp = 0xffffffffu;
constexpr int kLoadsAhead = 4;

// Where slot s = t * top_k + j lies in a [T, top_k] tensor whose rows are `stride` apart. Rows
// that are not padded (the usual case) need no division; otherwise a 32-bit one (the host checked
// that slots fit in int32): a 64-bit division is a long emulated sequence, and every slot needs
// this twice.
__device__ __forceinline__ long long SlotOffset(long long s, int top_k, long long stride) {
  if (stride == top_k) return s;
  const unsigned t = static_cast<unsigned>(s) / static_cast<unsigned>(top_k);
  return static_cast<long long>(t) * stride + (s - static_cast<long long>(t) * top_k);
}

// The id of slot s, or -1 past the end. An id outside [0, experts) is returned as it is.
__device__ __forceinline__ int SlotId(const MoePermuteParams& p, long long s, long long slots) {
  return s < slots ? p.topk_ids[SlotOffset(s, p.top_k, p.ids_stride)] : -1;
}

__device__ __forceinline__ bool ValidExpert(int e, int experts) {
  return static_cast<unsigned>(e) < static_cast<unsigned>(experts);
}

// The whole permutation; launched with exactly kPermuteBlock threads and one block.
// kMaxE: the specialization's max_experts (32..256, a multiple of 32).
template <int kMaxE>
__device__ __forceinline__ void PermuteBlock(const MoePermuteParams& p) {
  static_assert(kMaxE % 32 == 0 && kMaxE <= kPermuteBlock && kMaxE <= 256, "max_experts: 32..256, by 32");
  constexpr int kPerLane = kMaxE / 32;
  __shared__ int counts[kMaxE];
  __shared__ int starts[kMaxE + 1];
  __shared__ int ranked[kMaxE];  // slots of expert e ranked in earlier rounds
  // warp_counts[w][e]: round-local; a warp's leader for e writes its count, the scan turns it
  // into the warp's offset inside e, the leader sets it back to 0. Zero between rounds.
  __shared__ int warp_counts[kPermuteWarps][kMaxE];

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const unsigned lower_lanes = (1u << lane) - 1u;
  const int experts = p.experts;
  const long long slots = p.tokens * p.top_k;

  for (int i = tid; i < kMaxE; i += kPermuteBlock) {
    counts[i] = 0;
    ranked[i] = 0;
  }
  for (int i = tid; i < kPermuteWarps * kMaxE; i += kPermuteBlock) (&warp_counts[0][0])[i] = 0;
  __syncthreads();

  // 1. The histogram.
  for (long long base = 0; base < slots; base += static_cast<long long>(kLoadsAhead) * kPermuteBlock) {
    int ids[kLoadsAhead];
#pragma unroll
    for (int k = 0; k < kLoadsAhead; ++k) ids[k] = SlotId(p, base + k * kPermuteBlock + tid, slots);
#pragma unroll
    for (int k = 0; k < kLoadsAhead; ++k) {
      const int key = ValidExpert(ids[k], experts) ? ids[k] : -1;
      const unsigned peers = __match_any_sync(kPermuteFullWarp, key);
      if (key >= 0 && (peers & lower_lanes) == 0) atomicAdd(&counts[key], __popc(peers));
    }
  }
  __syncthreads();

  // 2. The aligned exclusive scan (warp 0): lane l holds experts [l * kPerLane, (l + 1) * kPerLane).
  if (warp == 0) {
    const int round_up = p.align - 1;  // align is a power of two
    int sizes[kPerLane];
    int sum = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      sizes[i] = (counts[lane * kPerLane + i] + round_up) & ~round_up;  // counts[e >= experts] are 0
      sum += sizes[i];
    }
    int inclusive = sum;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int below = __shfl_up_sync(kPermuteFullWarp, inclusive, offset);
      if (lane >= offset) inclusive += below;
    }
    int run = inclusive - sum;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane * kPerLane + i;
      starts[e] = run;
      if (e < experts) p.expert_counts[e] = counts[e];
      if (e <= experts) p.m_indptr[e] = run;
      run += sizes[i];
    }
    if (lane == 31) {
      starts[kMaxE] = run;
      if (experts == kMaxE) p.m_indptr[kMaxE] = run;
    }
  }
  __syncthreads();

  // 3. -1 for the padding rows of each group and for every row from m_indptr[E] on.
  for (int e = warp; e < experts; e += kPermuteWarps)
    for (int r = starts[e] + counts[e] + lane; r < starts[e + 1]; r += 32) p.row_to_slot[r] = -1;
  for (long long r = starts[experts] + tid; r < p.rows; r += kPermuteBlock) p.row_to_slot[r] = -1;

  // 4. The ranks, kPermuteBlock slots a round, in slot order.
  for (long long base = 0; base < slots; base += static_cast<long long>(kLoadsAhead) * kPermuteBlock) {
    int ids[kLoadsAhead];
#pragma unroll
    for (int k = 0; k < kLoadsAhead; ++k) ids[k] = SlotId(p, base + k * kPermuteBlock + tid, slots);
#pragma unroll
    for (int k = 0; k < kLoadsAhead; ++k) {
      const long long round_base = base + k * kPermuteBlock;
      if (round_base >= slots) break;  // block-uniform
      const long long s = round_base + tid;
      const int key = ValidExpert(ids[k], experts) ? ids[k] : -1;
      const unsigned peers = __match_any_sync(kPermuteFullWarp, key);
      const bool leader = key >= 0 && (peers & lower_lanes) == 0;
      if (leader) warp_counts[warp][key] = __popc(peers);
      __syncthreads();
      if (tid < experts) {
        int column[kPermuteWarps];
#pragma unroll
        for (int w = 0; w < kPermuteWarps; ++w) column[w] = warp_counts[w][tid];
        int run = ranked[tid];
#pragma unroll
        for (int w = 0; w < kPermuteWarps; ++w) {
          if (column[w] != 0) {
            warp_counts[w][tid] = run;
            run += column[w];
          }
        }
        ranked[tid] = run;
      }
      __syncthreads();
      if (s < slots) {
        int row = -1;
        if (key >= 0) {
          row = starts[key] + warp_counts[warp][key] + __popc(peers & lower_lanes);
          p.row_to_slot[row] = static_cast<int>(s);
        }
        p.slot_to_row[SlotOffset(s, p.top_k, p.slot_to_row_stride)] = row;
      }
      __syncwarp();  // every lane of the warp has read its offset before the leader clears it
      if (leader) warp_counts[warp][key] = 0;
      // The clear lands before the next round's leader of the same expert (maybe another lane)
      // writes its count. Only this warp writes row `warp`, and the scan reads it after the
      // next round's first barrier: no block-wide barrier is needed here.
      __syncwarp();
    }
  }
}

template <typename Unit>
__device__ __forceinline__ void CopyRow(char* dst, const char* src, long long units, int lane) {
  Unit* out = reinterpret_cast<Unit*>(dst);
  if (src == nullptr) {
    const Unit zero{};
    for (long long i = lane; i < units; i += 32) out[i] = zero;
    return;
  }
  const Unit* in = reinterpret_cast<const Unit*>(src);
#pragma unroll 4
  for (long long i = lane; i < units; i += 32) out[i] = in[i];
}

// Row `row` of permuted_x (one warp, lane `lane`): after kiln_moe_permute in stream order, so
// m_indptr and row_to_slot are its results.
__device__ __forceinline__ void GatherRow(const MoePermuteGatherParams& p, long long row, int lane) {
  if (row >= p.rows || row >= p.m_indptr[p.experts]) return;  // rows past the groups: not written
  const int slot = p.row_to_slot[row];
  const char* src = slot >= 0 ? static_cast<const char*>(p.x) + (slot / p.top_k) * p.x_stride_bytes : nullptr;
  char* dst = static_cast<char*>(p.permuted_x) + row * p.out_stride_bytes;
  switch (p.unit_bytes) {
    case 16: CopyRow<uint4>(dst, src, p.row_bytes / 16, lane); break;
    case 8: CopyRow<uint2>(dst, src, p.row_bytes / 8, lane); break;
    case 4: CopyRow<unsigned>(dst, src, p.row_bytes / 4, lane); break;
    default: CopyRow<unsigned short>(dst, src, p.row_bytes / 2, lane); break;
  }
}

}  // namespace moe
}  // namespace kiln
