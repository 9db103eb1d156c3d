// The merge step of a split batch_prefill: each kv chunk c of a split request left, per row of
// its row tile, a normalized partial output o_c and its log2-sum-exp lse_c in the workspace
// (kiln/prefill/batch_prefill.cuh or batch_prefill_sm90.cuh); the attention over all chunks is
//
//   M = max_c lse_c,   w_c = 2^(lse_c - M),   out = sum_c w_c o_c / sum_c w_c,
//   lse = (M + log2(sum_c w_c)) * ln 2     (natural log, as batch_prefill writes it)
//
// in fp32, one rounding to T; an empty chunk (lse -inf) weighs nothing, and a row no chunk saw
// gets out 0, lse -inf. grid = (batch, ceil(merge_max_q_len / kMergePositions)): block (b, y)
// takes query positions y * kMergePositions ... of request b and all their query heads, one warp
// per (position, head). Requests of one chunk were written by batch_prefill itself and are
// skipped. partial_out is 16-byte aligned; out, its strides and head_dim keep 4-byte pairs aligned.
#pragma once

#include "kiln/decode/attention_math.cuh"
#include "kiln/prefill/prefill_contract.h"

namespace kiln {
namespace prefill {

static_assert(kMergeThreads % 32 == 0, "the merge runs whole warps");
// Rows a warp loads at a time: at 8, ptxas spilled a destination pointer of the merge (prefill
// merges few chunks a row; decode's merge takes 8).
constexpr int kMergeRowsInFlight = 4;

// kRows: the row tile of the kernel that wrote the chunks (the spec's tile_rows).
template <typename T, int kHeadDim, int kGroup, int kRows>
__device__ __forceinline__ void MergePrefillStates(const KilnBatchPrefillParams& p) {
  constexpr int kMergeWarps = kMergeThreads / 32;
  static_assert(kGroup >= 1 && kGroup <= kMaxGroup, "group is 1 .. kMaxGroup");
  static_assert(ValidTileRows(kHeadDim, kRows), "a row tile of one of the family's kernels");

  const KilnPrefillSchedule& schedule = p.schedule;
  const int request = blockIdx.x;
  if (!schedule.listed || request >= min(schedule.batch, kMaxListedBatch)) return;
  const int chunks = schedule.kv_chunks[request];
  if (chunks <= 1) return;
  const long long q_begin = min(max(static_cast<long long>(p.qo_indptr[request]), 0ll), p.total_q);
  const long long q_end = min(max(static_cast<long long>(p.qo_indptr[request + 1]), q_begin), p.total_q);
  const int q_len = static_cast<int>(q_end - q_begin);
  const int first_item = schedule.item_begin[request];

  const int warp = threadIdx.x / 32;
  const int pairs = kMergePositions * p.num_qo_heads;
  for (int pair = warp; pair < pairs; pair += kMergeWarps) {
    const int i = blockIdx.y * kMergePositions + pair / p.num_qo_heads;
    const int head = pair % p.num_qo_heads;
    if (i >= q_len) break;  // positions only grow with pair
    const int kv_head = head / kGroup;
    const int r = i * kGroup + head % kGroup;
    const int tile = r / kRows;
    // Chunk c's row: ((item_begin[b] + tile * chunks + c) * num_kv_heads + kv_head) * kRows + r % kRows.
    const long long slot0 = (static_cast<long long>(first_item + tile * chunks) * p.num_kv_heads + kv_head) * kRows +
                            r % kRows;
    const long long chunk_stride = static_cast<long long>(p.num_kv_heads) * kRows;
    const float m_max = attention::MaxChunkLse(p.partial_lse, slot0, chunk_stride, chunks);
    const auto share = attention::MergeRowsPart<kHeadDim, kMergeRowsInFlight>(p.partial_out, p.partial_lse, slot0,
                                                                              chunk_stride, chunks, m_max, 0, 1);
    // The destinations are computed after the merge: held across it, ptxas spilled one.
    attention::WriteMerged<T, kHeadDim>(
        share, m_max, static_cast<T*>(p.out) + (q_begin + i) * p.out_stride_token + head * p.out_stride_head,
        p.lse != nullptr ? p.lse + (q_begin + i) * p.lse_stride_token + head : nullptr);
  }
}

}  // namespace prefill
}  // namespace kiln
