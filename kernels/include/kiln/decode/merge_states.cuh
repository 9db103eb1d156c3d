// The merge step of a split batch_decode: request b's items item_begin[b] .. item_begin[b+1]
// each left a normalized partial output o_i and its log2-sum-exp lse_i (kiln/decode/
// batch_decode.cuh); the attention over all of them is
//
//   M = max_i lse_i,   w_i = 2^(lse_i - M),   out = sum_i w_i o_i / sum_i w_i,
//   lse = (M + log2(sum_i w_i)) * ln 2     (natural log, as batch_decode writes it)
//
// in fp32, one rounding to T. One warp per (request, query head), kMergeHeadsPerBlock heads per
// block; grid = (batch, ceil(num_qo_heads / kMergeHeadsPerBlock)). Requests of one item were
// written by batch_decode itself and are skipped. partial_out must be 16-byte aligned; out and
// its strides at 4 bytes.
#pragma once

#include "kiln/decode/attention_math.cuh"
#include "kiln/decode/decode_contract.h"

namespace kiln {
namespace decode {

constexpr int kMergeHeadsPerBlock = 4;
constexpr int kMergeThreads = 32 * kMergeHeadsPerBlock;

template <typename T, int kHeadDim>
__device__ __forceinline__ void MergeStates(const KilnBatchDecodeParams& p) {
  const KilnDecodeSchedule& schedule = p.schedule;
  const int request = blockIdx.x;
  const int head = blockIdx.y * kMergeHeadsPerBlock + threadIdx.x / 32;
  if (request >= schedule.batch || head >= p.num_qo_heads) return;
  const int first = schedule.item_begin[request];
  const int count = schedule.item_begin[request + 1] - first;
  if (count <= 1) return;
  // Item first + i's partial row of this head: (first + i) * num_qo_heads + head.
  attention::MergePartialRows<T, kHeadDim>(
      p.partial_out, p.partial_lse, static_cast<long long>(first) * p.num_qo_heads + head, p.num_qo_heads, count,
      static_cast<T*>(p.out) + request * p.out_stride_batch + head * p.out_stride_head,
      p.lse != nullptr ? p.lse + request * p.lse_stride_batch + head : nullptr);
}

}  // namespace decode
}  // namespace kiln
