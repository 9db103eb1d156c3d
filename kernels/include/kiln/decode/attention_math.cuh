// What the attention kernels (batch_decode, batch_prefill) compute the same way: -inf and the
// log2 constants of a softmax kept in log2 units, the XOR swizzle of 16-byte chunks in their
// K/V (and Q) tiles, a logit with the optional soft cap, and the merge of a row's split-KV
// partial results by log-sum-exp.
#pragma once

#include "kiln/common/numeric.cuh"
#include "kiln/common/vec.cuh"
#include "kiln/decode/warp_mma.cuh"

namespace kiln {
namespace attention {

__device__ __forceinline__ float NegativeInfinity() { return __int_as_float(0xff800000u); }

constexpr float kLog2E = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of Shape::kChunksPerRow chunks a
// row: chunks are XOR-permuted within each group of 8 by the row, so the 8 rows one ldmatrix
// phase reads (one logical chunk) hit 8 distinct 16-byte bank groups.
template <class Shape>
__device__ __forceinline__ unsigned SwizzledOffset(int row, int chunk) {
  return static_cast<unsigned>((row * Shape::kChunksPerRow + (chunk ^ (row & 7))) * 16);
}

// A logit in log2 units (logit_scale = sm_scale * log2 e). Soft cap (Shape::kSoftCap;
// logit_scale = sm_scale / cap, cap_scale = cap * log2 e): tanh(x) = 1 - 2 / (2^(2x log2 e) + 1),
// with |x| clamped to 15 (tanh(15) is 1 in fp32); its absolute error (~1e-7) is what a logit
// needs.
template <class Shape>
__device__ __forceinline__ float Logit(float qk, float logit_scale, float cap_scale) {
  if constexpr (Shape::kSoftCap) {
    const float x = fminf(fmaxf(qk * logit_scale, -15.f), 15.f);
    const float t = 1.f - __fdividef(2.f, decode::Exp2(x * (2.f * kLog2E)) + 1.f);
    return t * cap_scale;
  } else {
    return qk * logit_scale;
  }
}

// One warp merges `count` partial results of one (query, head) — normalized fp32 rows o_c of
// kHeadDim at partial_out + slot_c * kHeadDim and their log2-sum-exp lse_c, slot_c = first +
// c * stride — into
//
//   M = max_c lse_c,   w_c = 2^(lse_c - M),   out = sum_c w_c o_c / sum_c w_c,
//   lse = (M + log2(sum_c w_c)) * ln 2     (natural log)
//
// in fp32, one rounding to T. An empty chunk (lse -inf) weighs nothing and its row is not read
// (it may be unwritten); with no chunk seeing anything, out is 0 and lse -inf. `lse` null: not
// written. partial_out is 16-byte aligned; out 4-byte aligned.
template <typename T, int kHeadDim>
__device__ __forceinline__ void MergePartialRows(const float* partial_out, const float* partial_lse, long long first,
                                                 long long stride, int count, T* out, float* lse) {
  using Pair = typename PairOf<T>::type;
  constexpr int kPerLane = kHeadDim / 32;            // 2, 4 or 8 dims per lane
  constexpr int kVec = kPerLane < 4 ? kPerLane : 4;  // floats per load (at most 16 bytes)
  constexpr int kLoads = kPerLane / kVec;
  static_assert(kHeadDim % 64 == 0, "head_dim must be a multiple of 64");
  const float kNegInf = NegativeInfinity();
  const int lane = threadIdx.x % 32;

  float m_max = kNegInf;
  for (int c = 0; c < count; ++c) m_max = fmaxf(m_max, partial_lse[first + c * stride]);
  float acc[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) acc[e] = 0.f;
  float sum = 0.f;
  for (int c = 0; c < count; ++c) {
    const long long slot = first + c * stride;
    const float lse_c = partial_lse[slot];
    if (lse_c == kNegInf) continue;
    const float w = decode::Exp2(lse_c - m_max);
    sum += w;
    const float* part = partial_out + slot * kHeadDim;
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const Vec<float, kVec> v = LoadVec<kVec>(part + (j * 32 + lane) * kVec);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[j * kVec + e] = fmaf(w, v.v[e], acc[j * kVec + e]);
    }
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
#pragma unroll
    for (int e = 0; e < kVec; e += 2) {
      *reinterpret_cast<Pair*>(out + (j * 32 + lane) * kVec + e) = FromFloat2<Pair>(acc[j * kVec + e] * inv,
                                                                                    acc[j * kVec + e + 1] * inv);
    }
  }
  if (lane == 0 && lse != nullptr) *lse = sum > 0.f ? (m_max + log2f(sum)) * kLn2 : kNegInf;
}

}  // namespace attention
}  // namespace kiln
