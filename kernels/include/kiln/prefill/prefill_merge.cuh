// The merge step of a split batch_prefill: each kv chunk c of a split request left, per row of
// its row tile, a normalized partial output o_c and its log2-sum-exp lse_c in the workspace
// (kiln/prefill/batch_prefill.cuh); the attention over all chunks is
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

#include "kiln/common/numeric.cuh"
#include "kiln/common/vec.cuh"
#include "kiln/decode/warp_mma.cuh"
#include "kiln/prefill/prefill_contract.h"

namespace kiln {
namespace prefill {

static_assert(kMergeThreads % 32 == 0, "the merge runs whole warps");

template <typename T, int kHeadDim, int kGroup>
__device__ __forceinline__ void MergePrefillStates(const KilnBatchPrefillParams& p) {
  using Pair = typename PairOf<T>::type;
  constexpr int kMergeWarps = kMergeThreads / 32;
  constexpr int kPerLane = kHeadDim / 32;            // 2, 4 or 8 dims per lane
  constexpr int kVec = kPerLane < 4 ? kPerLane : 4;  // floats per load (at most 16 bytes)
  constexpr int kLoads = kPerLane / kVec;
  static_assert(kHeadDim % 64 == 0, "head_dim must be a multiple of 64");
  static_assert(kGroup >= 1 && kGroup <= kMaxGroup, "group is 1 .. kMaxGroup");
  const float kNegInf = __int_as_float(0xff800000u);

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
  const int lane = threadIdx.x % 32;
  const int pairs = kMergePositions * p.num_qo_heads;
  for (int pair = warp; pair < pairs; pair += kMergeWarps) {
    const int i = blockIdx.y * kMergePositions + pair / p.num_qo_heads;
    const int head = pair % p.num_qo_heads;
    if (i >= q_len) break;  // positions only grow with pair
    const int kv_head = head / kGroup;
    const int r = i * kGroup + head % kGroup;
    const int tile = r / kTileRows;
    // Chunk c's row: ((item_begin[b] + tile * chunks + c) * num_kv_heads + kv_head) * kTileRows + r % kTileRows.
    const long long slot0 =
        (static_cast<long long>(first_item + tile * chunks) * p.num_kv_heads + kv_head) * kTileRows + r % kTileRows;
    const long long chunk_stride = static_cast<long long>(p.num_kv_heads) * kTileRows;

    float m_max = kNegInf;
    for (int c = 0; c < chunks; ++c) m_max = fmaxf(m_max, p.partial_lse[slot0 + c * chunk_stride]);
    float acc[kPerLane];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] = 0.f;
    float sum = 0.f;
    for (int c = 0; c < chunks; ++c) {
      const long long slot = slot0 + c * chunk_stride;
      const float lse_c = p.partial_lse[slot];
      if (lse_c == kNegInf) continue;  // an empty chunk weighs nothing (and its row may be unwritten)
      const float w = decode::Exp2(lse_c - m_max);
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
    T* out = static_cast<T*>(p.out) + (q_begin + i) * p.out_stride_token + head * p.out_stride_head;
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
#pragma unroll
      for (int e = 0; e < kVec; e += 2) {
        *reinterpret_cast<Pair*>(out + (j * 32 + lane) * kVec + e) = FromFloat2<Pair>(acc[j * kVec + e] * inv,
                                                                                      acc[j * kVec + e + 1] * inv);
      }
    }
    if (lane == 0 && p.lse != nullptr) {
      p.lse[(q_begin + i) * p.lse_stride_token + head] = sum > 0.f ? (m_max + log2f(sum)) * 0.6931471805599453f
                                                                   : kNegInf;
    }
  }
}

}  // namespace prefill
}  // namespace kiln
