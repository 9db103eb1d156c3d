// The merge step of a split batch_decode: request b's items item_begin[b] .. item_begin[b+1]
// each left a normalized partial output o_i and its log2-sum-exp lse_i (kiln/decode/
// batch_decode.cuh); the attention over all of them is
//
//   M = max_i lse_i,   w_i = 2^(lse_i - M),   out = sum_i w_i o_i / sum_i w_i,
//   lse = (M + log2(sum_i w_i)) * ln 2     (natural log, as batch_decode writes it)
//
// in fp32, one rounding to T. One block per (request, query head), its kMergeWarps warps each
// merging every kMergeWarps-th item (a batch-1 request of 32 items: 8 rows a warp, their loads
// in flight together) and summing their shares through shared memory; grid = (batch,
// num_qo_heads). Requests of one item were written by batch_decode itself and are skipped.
// partial_out must be 16-byte aligned; out and its strides at 4 bytes.
#pragma once

#include "kiln/decode/attention_math.cuh"
#include "kiln/decode/decode_contract.h"

namespace kiln {
namespace decode {

constexpr int kMergeWarps = 4;
constexpr int kMergeThreads = 32 * kMergeWarps;
constexpr int kMergeRowsInFlight = 8;  // per warp: a batch-1 request's 32 items in one round trip

template <typename T, int kHeadDim>
__device__ __forceinline__ void MergeStates(const KilnBatchDecodeParams& p) {
  using Share = attention::MergeShare<kHeadDim>;
  const KilnDecodeSchedule& schedule = p.schedule;
  const int request = blockIdx.x;
  const int head = blockIdx.y;
  if (request >= schedule.batch || head >= p.num_qo_heads) return;
  const int first = schedule.item_begin[request];
  const int count = schedule.item_begin[request + 1] - first;
  if (count <= 1) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // Item first + i's partial row of this head: (first + i) * num_qo_heads + head.
  const long long slot0 = static_cast<long long>(first) * p.num_qo_heads + head;
  const float m_max = attention::MaxChunkLse(p.partial_lse, slot0, p.num_qo_heads, count);
  Share share = attention::MergeRowsPart<kHeadDim, kMergeRowsInFlight>(p.partial_out, p.partial_lse, slot0,
                                                                       p.num_qo_heads, count, m_max, warp, kMergeWarps);

  __shared__ float acc_smem[kMergeWarps - 1][Share::kPerLane][32];  // warps 1.. hand their shares to warp 0
  __shared__ float sum_smem[kMergeWarps - 1];
  if (warp > 0) {
#pragma unroll
    for (int e = 0; e < Share::kPerLane; ++e) acc_smem[warp - 1][e][lane] = share.acc[e];
    if (lane == 0) sum_smem[warp - 1] = share.sum;
  }
  __syncthreads();
  if (warp > 0) return;
#pragma unroll
  for (int w = 0; w < kMergeWarps - 1; ++w) {
#pragma unroll
    for (int e = 0; e < Share::kPerLane; ++e) share.acc[e] += acc_smem[w][e][lane];
    share.sum += sum_smem[w];
  }
  attention::WriteMerged<T, kHeadDim>(share, m_max,
                                      static_cast<T*>(p.out) + request * p.out_stride_batch + head * p.out_stride_head,
                                      p.lse != nullptr ? p.lse + request * p.lse_stride_batch + head : nullptr);
}

}  // namespace decode
}  // namespace kiln
