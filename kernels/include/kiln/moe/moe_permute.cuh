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
// Few slots (MoePermuteMultiBlock false): PermuteBlock is the whole op in one block of
// kPermuteWarps warps (one launch, no workspace, no host sync, so a CUDA graph can capture it):
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
// Many slots: the same steps spread over a block per chunk of kPermuteChunk slots in three
// launches (count, rank, invert: see "The multi-block permutation" below), since one block
// walks 32k slots in about 100 us on the H200 (a round is two barriers and a 32-warp scan).
// Both give the same bits.
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

// 1. The histogram of one round's ids into counts: each warp's lanes with equal ids found with
// __match_any_sync, the lowest of them adds their number.
__device__ __forceinline__ void CountIds(int id, int experts, unsigned lower_lanes, int* counts) {
  const int key = ValidExpert(id, experts) ? id : -1;
  const unsigned peers = __match_any_sync(kPermuteFullWarp, key);
  if (key >= 0 && (peers & lower_lanes) == 0) atomicAdd(&counts[key], __popc(peers));
}

// 2. The aligned exclusive scan of counts into starts (warp 0 only; counts[e >= experts] are 0):
// lane l holds experts [l * kPerLane, (l + 1) * kPerLane). With `write`, also the outputs
// expert_counts and m_indptr.
template <int kMaxE>
__device__ __forceinline__ void AlignedScan(const MoePermuteParams& p, const int* counts, int* starts, int lane,
                                            bool write) {
  constexpr int kPerLane = kMaxE / 32;
  const int experts = p.experts;
  const int round_up = p.align - 1;  // align is a power of two
  int sizes[kPerLane];
  int sum = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    sizes[i] = (counts[lane * kPerLane + i] + round_up) & ~round_up;
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
    if (write && e < experts) p.expert_counts[e] = counts[e];
    if (write && e <= experts) p.m_indptr[e] = run;
    run += sizes[i];
  }
  if (lane == 31) {
    starts[kMaxE] = run;
    if (write && experts == kMaxE) p.m_indptr[kMaxE] = run;
  }
}

// The shared tables of a ranking block. warp_counts[w][e]: round-local; a warp's leader for e
// writes its count, the scan turns it into the warp's offset inside e, the leader sets it back to
// 0. Zero between rounds.
template <int kMaxE>
struct RankTables {
  int counts[kMaxE];
  int starts[kMaxE + 1];
  int ranked[kMaxE];  // slots of expert e ranked before this round
  int warp_counts[kPermuteWarps][kMaxE];
};

// 4. One round of kPermuteBlock slots from round_base, in slot order: slot s's row is
//      starts[e] + ranked[e] + (e's slots in earlier warps of this round)
//                            + (e's slots in earlier lanes of its warp)
// the last from the match mask (popc of the lower lanes), the middle from a scan over the warps
// of the per-warp counts (thread e sums column e of warp_counts). Writes slot_to_row, and with
// `write_row_to_slot` row_to_slot too (the multi-block ranking leaves that to its inversion:
// row_to_slot holds the other blocks' counts until every block has read them). Every thread of
// the block calls it (two barriers).
template <int kMaxE>
__device__ __forceinline__ void RankRound(const MoePermuteParams& p, RankTables<kMaxE>& t, long long round_base,
                                          long long slots, int id, bool write_row_to_slot) {
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const unsigned lower_lanes = (1u << (tid % 32)) - 1u;
  const int experts = p.experts;
  const long long s = round_base + tid;
  const int key = ValidExpert(id, experts) ? id : -1;
  const unsigned peers = __match_any_sync(kPermuteFullWarp, key);
  const bool leader = key >= 0 && (peers & lower_lanes) == 0;
  if (leader) t.warp_counts[warp][key] = __popc(peers);
  __syncthreads();
  if (tid < experts) {
    int column[kPermuteWarps];
#pragma unroll
    for (int w = 0; w < kPermuteWarps; ++w) column[w] = t.warp_counts[w][tid];
    int run = t.ranked[tid];
#pragma unroll
    for (int w = 0; w < kPermuteWarps; ++w) {
      if (column[w] != 0) {
        t.warp_counts[w][tid] = run;
        run += column[w];
      }
    }
    t.ranked[tid] = run;
  }
  __syncthreads();
  if (s < slots) {
    int row = -1;
    if (key >= 0) {
      row = t.starts[key] + t.warp_counts[warp][key] + __popc(peers & lower_lanes);
      if (write_row_to_slot) p.row_to_slot[row] = static_cast<int>(s);
    }
    p.slot_to_row[SlotOffset(s, p.top_k, p.slot_to_row_stride)] = row;
  }
  __syncwarp();  // every lane of the warp has read its offset before the leader clears it
  if (leader) t.warp_counts[warp][key] = 0;
  // The clear lands before the next round's leader of the same expert (maybe another lane)
  // writes its count. Only this warp writes row `warp`, and the scan reads it after the next
  // round's first barrier: no block-wide barrier is needed here.
  __syncwarp();
}

// The whole permutation in one block (few slots: MoePermuteMultiBlock false); launched with
// exactly kPermuteBlock threads and one block. kMaxE: the specialization's max_experts (32..256,
// a multiple of 32).
template <int kMaxE>
__device__ __forceinline__ void PermuteBlock(const MoePermuteParams& p) {
  static_assert(kMaxE % 32 == 0 && kMaxE <= kPermuteBlock && kMaxE <= 256, "max_experts: 32..256, by 32");
  __shared__ RankTables<kMaxE> t;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const unsigned lower_lanes = (1u << lane) - 1u;
  const int experts = p.experts;
  const long long slots = p.tokens * p.top_k;

  for (int i = tid; i < kMaxE; i += kPermuteBlock) {
    t.counts[i] = 0;
    t.ranked[i] = 0;
  }
  for (int i = tid; i < kPermuteWarps * kMaxE; i += kPermuteBlock) (&t.warp_counts[0][0])[i] = 0;
  __syncthreads();

  // 1. The histogram.
  for (long long base = 0; base < slots; base += static_cast<long long>(kLoadsAhead) * kPermuteBlock) {
    int ids[kLoadsAhead];
#pragma unroll
    for (int k = 0; k < kLoadsAhead; ++k) ids[k] = SlotId(p, base + k * kPermuteBlock + tid, slots);
#pragma unroll
    for (int k = 0; k < kLoadsAhead; ++k) CountIds(ids[k], experts, lower_lanes, t.counts);
  }
  __syncthreads();

  // 2. The aligned exclusive scan.
  if (warp == 0) AlignedScan<kMaxE>(p, t.counts, t.starts, lane, true);
  __syncthreads();

  // 3. -1 for the padding rows of each group and for every row from m_indptr[E] on.
  for (int e = warp; e < experts; e += kPermuteWarps)
    for (int r = t.starts[e] + t.counts[e] + lane; r < t.starts[e + 1]; r += 32) p.row_to_slot[r] = -1;
  for (long long r = t.starts[experts] + tid; r < p.rows; r += kPermuteBlock) p.row_to_slot[r] = -1;

  // 4. The ranks, kPermuteBlock slots a round, in slot order.
  for (long long base = 0; base < slots; base += static_cast<long long>(kLoadsAhead) * kPermuteBlock) {
    int ids[kLoadsAhead];
#pragma unroll
    for (int k = 0; k < kLoadsAhead; ++k) ids[k] = SlotId(p, base + k * kPermuteBlock + tid, slots);
#pragma unroll
    for (int k = 0; k < kLoadsAhead; ++k) {
      const long long round_base = base + k * kPermuteBlock;
      if (round_base >= slots) break;  // block-uniform
      RankRound<kMaxE>(p, t, round_base, slots, ids[k], true);
    }
  }
}

// ---- The multi-block permutation (many slots: MoePermuteMultiBlock true) ----------------------
// Three launches in stream order, block c of the first two owning chunk c, the kPermuteChunk
// slots from c * kPermuteChunk (the launch after a launch sees all its writes):
//   count   each chunk's histogram into row_to_slot[c * E + e] (a scratch: MoePermuteChunks * E
//           <= rows, see the contract), every e < E written;
//   rank    every block sums the chunks' counts (each expert's total, and its count in earlier
//           chunks), scans the totals into starts as the single block does (block 0 writes
//           expert_counts and m_indptr), then ranks its chunk in one round starting each expert
//           at its count in earlier chunks: the same rows as the single block gives (stable,
//           deterministic: no atomics decide a position). It writes slot_to_row only;
//   invert  row_to_slot from slot_to_row (a thread per row: the slot whose row it is, or -1 for
//           padding and for the rows from m_indptr[E] on), overwriting the scratch.

template <int kMaxE>
__device__ __forceinline__ void PermuteCountChunk(const MoePermuteParams& p) {
  __shared__ int counts[kMaxE];
  const int tid = static_cast<int>(threadIdx.x);
  const long long slots = p.tokens * p.top_k;
  const long long chunk = blockIdx.x;
  const int id = SlotId(p, chunk * kPermuteChunk + tid, slots);
  for (int i = tid; i < kMaxE; i += kPermuteBlock) counts[i] = 0;
  __syncthreads();
  CountIds(id, p.experts, (1u << (tid % 32)) - 1u, counts);
  __syncthreads();
  for (int e = tid; e < p.experts; e += kPermuteBlock) p.row_to_slot[chunk * p.experts + e] = counts[e];
}

template <int kMaxE>
__device__ __forceinline__ void PermuteRankChunk(const MoePermuteParams& p) {
  static_assert(kMaxE % 32 == 0 && kMaxE <= kPermuteBlock && kMaxE <= 256, "max_experts: 32..256, by 32");
  // The chunk sums: thread (g, e) adds the chunks g, g + kGroups, ... of expert e; the partial
  // sums go through warp_counts (rows 0..kGroups-1: earlier chunks, kGroups..: all chunks).
  constexpr int kGroups = kPermuteBlock / kMaxE < kPermuteWarps / 2 ? kPermuteBlock / kMaxE : kPermuteWarps / 2;
  __shared__ RankTables<kMaxE> t;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int experts = p.experts;
  const long long slots = p.tokens * p.top_k;
  const long long chunk = blockIdx.x;
  const long long chunks = gridDim.x;
  const int id = SlotId(p, chunk * kPermuteChunk + tid, slots);

  const int g = tid / kMaxE;
  const int e = tid % kMaxE;
  if (g < kGroups) {
    int before = 0;
    int total = 0;
    if (e < experts) {
      for (long long c = g; c < chunks; c += kGroups) {
        const int n = p.row_to_slot[c * experts + e];
        total += n;
        if (c < chunk) before += n;
      }
    }
    t.warp_counts[g][e] = before;
    t.warp_counts[kGroups + g][e] = total;
  }
  __syncthreads();
  if (tid < kMaxE) {
    int before = 0;
    int total = 0;
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      before += t.warp_counts[i][tid];
      total += t.warp_counts[kGroups + i][tid];
    }
    t.counts[tid] = total;  // 0 for tid >= experts
    t.ranked[tid] = before;
  }
  __syncthreads();
  for (int i = tid; i < kPermuteWarps * kMaxE; i += kPermuteBlock) (&t.warp_counts[0][0])[i] = 0;
  if (warp == 0) AlignedScan<kMaxE>(p, t.counts, t.starts, tid, chunk == 0);
  __syncthreads();
  RankRound<kMaxE>(p, t, chunk * kPermuteChunk, slots, id, false);
}

// Row r of row_to_slot after the ranking (one thread per row, kInvertBlock a block): the slot
// ranked into it, or -1 (padding of its group, or past m_indptr[E]). Thread r also moves slot r's
// row (slots <= rows): the two writes of a row come from different threads but never both.
template <int kMaxE>
__device__ __forceinline__ void PermuteInvert(const MoePermuteParams& p) {
  __shared__ int indptr[kMaxE + 1];
  __shared__ int counts[kMaxE];
  const int tid = static_cast<int>(threadIdx.x);
  const int experts = p.experts;
  for (int i = tid; i <= experts; i += kInvertBlock) indptr[i] = p.m_indptr[i];
  for (int i = tid; i < experts; i += kInvertBlock) counts[i] = p.expert_counts[i];
  __syncthreads();
  const long long r = static_cast<long long>(blockIdx.x) * kInvertBlock + tid;
  const long long slots = p.tokens * p.top_k;
  if (r < slots) {
    const int row = p.slot_to_row[SlotOffset(r, p.top_k, p.slot_to_row_stride)];
    if (row >= 0) p.row_to_slot[row] = static_cast<int>(r);
  }
  if (r >= p.rows) return;
  if (r >= indptr[experts]) {
    p.row_to_slot[r] = -1;
    return;
  }
  // The group holding row r: the last e with indptr[e] <= r (empty groups share their start
  // with the next group, so the last one is the group r lies in).
  int lo = 0;
  int hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (indptr[mid] <= r) lo = mid;
    else hi = mid - 1;
  }
  if (r - indptr[lo] >= counts[lo]) p.row_to_slot[r] = -1;
}

constexpr int kGatherLoadsInFlight = 2;

template <typename Unit>
__device__ __forceinline__ void CopyRow(char* dst, const char* src, long long units, int lane) {
  Unit* out = reinterpret_cast<Unit*>(dst);
  if (src == nullptr) {
    const Unit zero{};
    for (long long i = lane; i < units; i += 32) out[i] = zero;
    return;
  }
  const Unit* in = reinterpret_cast<const Unit*>(src);
  // Loads in flight before their stores: `in` and `out` may alias as far as the compiler knows,
  // so a plain (even unrolled) loop waits out each load's latency before the next load, and a
  // row of H 7168 bf16 took 28 such waits (with four, ptxas spilled).
  long long i = lane;
  for (; i + (kGatherLoadsInFlight - 1) * 32 < units; i += kGatherLoadsInFlight * 32) {
    Unit v[kGatherLoadsInFlight];
#pragma unroll
    for (int k = 0; k < kGatherLoadsInFlight; ++k) v[k] = in[i + 32 * k];
#pragma unroll
    for (int k = 0; k < kGatherLoadsInFlight; ++k) out[i + 32 * k] = v[k];
  }
  for (; i < units; i += 32) out[i] = in[i];
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
