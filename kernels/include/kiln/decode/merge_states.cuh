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

#include "kiln/common/numeric.cuh"
#include "kiln/common/vec.cuh"
#include "kiln/decode/decode_contract.h"
#include "kiln/decode/warp_mma.cuh"

namespace kiln {
namespace decode {

constexpr int kMergeHeadsPerBlock = 4;
constexpr int kMergeThreads = 32 * kMergeHeadsPerBlock;

template <typename T, int kHeadDim>
__device__ __forceinline__ void MergeStates(const KilnBatchDecodeParams& p) {
  using Pair = typename PairOf<T>::type;
  constexpr int kPerLane = kHeadDim / 32;            // 2, 4 or 8 dims per lane
  constexpr int kVec = kPerLane < 4 ? kPerLane : 4;  // floats per load (at most 16 bytes)
  constexpr int kLoads = kPerLane / kVec;
  static_assert(kHeadDim % 64 == 0, "head_dim must be a multiple of 64");
  const float kNegInf = __int_as_float(0xff800000u);

  const KilnDecodeSchedule& schedule = p.schedule;
  const int request = blockIdx.x;
  const int head = blockIdx.y * kMergeHeadsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (request >= schedule.batch || head >= p.num_qo_heads) return;
  const int first = schedule.item_begin[request];
  const int count = schedule.item_begin[request + 1] - first;
  if (count <= 1) return;

  float m_max = kNegInf;
  for (int i = 0; i < count; ++i) {
    m_max = fmaxf(m_max, p.partial_lse[static_cast<long long>(first + i) * p.num_qo_heads + head]);
  }
  float acc[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) acc[e] = 0.f;
  float sum = 0.f;
  for (int i = 0; i < count; ++i) {
    const long long slot = static_cast<long long>(first + i) * p.num_qo_heads + head;
    const float lse_i = p.partial_lse[slot];
    const float w = lse_i == kNegInf ? 0.f : Exp2(lse_i - m_max);  // an empty chunk weighs nothing
    sum += w;
    const float* part = p.partial_out + slot * kHeadDim;
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const Vec<float, kVec> v = LoadVec<kVec>(part + (j * 32 + lane) * kVec);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[j * kVec + e] = fmaf(w, v.v[e], acc[j * kVec + e]);
    }
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  T* out = static_cast<T*>(p.out) + request * p.out_stride_batch + head * p.out_stride_head;
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
#pragma unroll
    for (int e = 0; e < kVec; e += 2) {
      *reinterpret_cast<Pair*>(out + (j * 32 + lane) * kVec + e) = FromFloat2<Pair>(acc[j * kVec + e] * inv,
                                                                                    acc[j * kVec + e + 1] * inv);
    }
  }
  if (lane == 0 && p.lse != nullptr) {
    p.lse[request * p.lse_stride_batch + head] = sum > 0.f ? (m_max + log2f(sum)) * 0.6931471805599453f : kNegInf;
  }
}

}  // namespace decode
}  // namespace kiln
