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

// The merge of a row's split-KV partial results: `count` normalized fp32 rows o_c of kHeadDim
// at partial_out + slot_c * kHeadDim and their log2-sum-exp lse_c, slot_c = first + c * stride,
// give
//
//   M = max_c lse_c,   w_c = 2^(lse_c - M),   out = sum_c w_c o_c / sum_c w_c,
//   lse = (M + log2(sum_c w_c)) * ln 2     (natural log)
//
// in fp32, one rounding to T. An empty chunk (lse -inf) weighs nothing and its row is not used
// (it may be unwritten); with no chunk seeing anything, out is 0 and lse -inf. partial_out is
// 16-byte aligned; out 4-byte aligned.
//
// The merge is a chain of memory round trips, not arithmetic (a batch-1 decode of 32 chunks
// merges 32 rows per head), so loads are issued together: the lanes read 32 lse values at once
// (lane i: chunk base + i) and reduce them with shuffles, and the rows go kRowsInFlight at
// a time, every row's load issued before its weight is applied. Several warps may share one
// row's chunks (MergeRowsPart), each taking every parts-th chunk.

// A warp's share of a merge: its lanes' dims of sum_c w_c o_c (dim (j * 32 + lane) * kVec + e
// in acc[j * kVec + e]) and sum_c w_c, over its chunks.
template <int kHeadDim>
struct MergeShare {
  static constexpr int kPerLane = kHeadDim / 32;            // 2, 4 or 8 dims per lane
  static constexpr int kVec = kPerLane < 4 ? kPerLane : 4;  // floats per load (at most 16 bytes)
  static constexpr int kLoads = kPerLane / kVec;
  static_assert(kHeadDim % 64 == 0, "head_dim must be a multiple of 64");
  float acc[kPerLane];
  float sum;
};

// M = max_c lse_c over the `count` chunks, on every lane of the warp.
__device__ __forceinline__ float MaxChunkLse(const float* partial_lse, long long first, long long stride, int count) {
  const int lane = threadIdx.x % 32;
  float m_max = NegativeInfinity();
  for (int base = 0; base < count; base += 32)
    if (base + lane < count) m_max = fmaxf(m_max, partial_lse[first + (base + lane) * stride]);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) m_max = fmaxf(m_max, __shfl_xor_sync(0xffffffffu, m_max, offset));
  return m_max;
}

// The warp's share of chunks part, part + parts, ... (of `count`), given M, kRowsInFlight rows
// loaded at a time.
template <int kHeadDim, int kRowsInFlight>
__device__ __forceinline__ MergeShare<kHeadDim> MergeRowsPart(const float* partial_out, const float* partial_lse,
                                                              long long first, long long stride, int count, float m_max,
                                                              int part, int parts) {
  using Share = MergeShare<kHeadDim>;
  constexpr int kVec = Share::kVec;
  constexpr int kLoads = Share::kLoads;
  const float kNegInf = NegativeInfinity();
  const int lane = threadIdx.x % 32;
  Share share;
#pragma unroll
  for (int e = 0; e < Share::kPerLane; ++e) share.acc[e] = 0.f;
  float sum = 0.f;  // this lane's chunks' weights; summed over the warp at the end
  const int mine = count > part ? (count - part + parts - 1) / parts : 0;  // this warp's chunks
  auto slot_of = [&](int k) { return first + static_cast<long long>(part + k * parts) * stride; };
  for (int base = 0; base < mine; base += 32) {
    // Lane i's weight is the warp's chunk base + i's: 0 for an empty chunk (and past `mine`).
    const float lse_c = base + lane < mine ? partial_lse[slot_of(base + lane)] : kNegInf;
    const float w_lane = lse_c == kNegInf ? 0.f : decode::Exp2(lse_c - m_max);
    sum += w_lane;
    const int rows = min(32, mine - base);
    for (int r0 = 0; r0 < rows; r0 += kRowsInFlight) {
      // Every row of the batch is loaded unconditionally (past `rows`, the last one again) and
      // a row that weighs nothing is dropped after its load by a select: a predicated load into
      // a zeroed register made ptxas reuse one register set for all rows, one round trip each.
      // Dropped, not multiplied by 0: an empty chunk's row may be unwritten.
      float w[kRowsInFlight];
      Vec<float, kVec> v[kRowsInFlight][kLoads];
#pragma unroll
      for (int r = 0; r < kRowsInFlight; ++r) {
        w[r] = __shfl_sync(0xffffffffu, w_lane, (r0 + r) % 32);
        if (r0 + r >= rows) w[r] = 0.f;  // the shuffle read another chunk's weight
        const float* row = partial_out + slot_of(base + min(r0 + r, rows - 1)) * kHeadDim;
#pragma unroll
        for (int j = 0; j < kLoads; ++j) v[r][j] = LoadVec<kVec>(row + (j * 32 + lane) * kVec);
      }
#pragma unroll
      for (int r = 0; r < kRowsInFlight; ++r)
#pragma unroll
        for (int j = 0; j < kLoads; ++j)
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            const float a = share.acc[j * kVec + e];
            share.acc[j * kVec + e] = w[r] != 0.f ? fmaf(w[r], v[r][j].v[e], a) : a;
          }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  share.sum = sum;
  return share;
}

// out = acc / sum (this lane's dims), lse = (M + log2(sum)) ln 2 by lane 0 (`lse` null: not
// written).
template <typename T, int kHeadDim>
__device__ __forceinline__ void WriteMerged(const MergeShare<kHeadDim>& share, float m_max, T* out, float* lse) {
  using Pair = typename PairOf<T>::type;
  using Share = MergeShare<kHeadDim>;
  const int lane = threadIdx.x % 32;
  // sum is 1 (the largest chunk's weight) to count: the fast reciprocal (2 ulp) is exact enough for
  // a T output, and IEEE division's slow-path call made ptxas spill around it.
  const float inv = share.sum > 0.f ? __fdividef(1.f, share.sum) : 0.f;
#pragma unroll
  for (int j = 0; j < Share::kLoads; ++j) {
#pragma unroll
    for (int e = 0; e < Share::kVec; e += 2) {
      const int a = j * Share::kVec + e;
      *reinterpret_cast<Pair*>(out + (j * 32 + lane) * Share::kVec + e) = FromFloat2<Pair>(share.acc[a] * inv,
                                                                                           share.acc[a + 1] * inv);
    }
  }
  if (lane == 0 && lse != nullptr) *lse = share.sum > 0.f ? (m_max + log2f(share.sum)) * kLn2 : NegativeInfinity();
}

}  // namespace attention
}  // namespace kiln
