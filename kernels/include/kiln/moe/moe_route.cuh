// The device code of moe_route (kiln/moe/moe_contract.h, docs/kernels-moe.md): one warp per
// token, lane l holding experts l, l + 32, ... (kSlots = max_experts / 32 of them).
//
// Scores and keys are doubles: a router row is at most 256 values, so fp64 costs nothing that
// shows next to the row's load, and it makes every selection the float64 reference's (ties
// are exact ties of the same double expression on both sides; any other pair of keys differs
// by far more than the last bits in which the device's exp and the host's may disagree).
//
//   u_e   softmax: exp(x_e - max x) / sum_j exp(x_j - max x);  sigmoid: 1 / (1 + exp(-x_e))
//   key_e u_e + correction_bias[e] (0 without a bias); a NaN key ranks as -inf
//   group limit (n_group > 1): group g = experts [g E/n, (g+1) E/n); its score is the sum of
//         its two largest keys (its one key when a group has one expert); the topk_group
//         groups of largest score are kept (ties: the lower group)
//   choice top_k times: the kept, not yet chosen expert of largest key (ties: the lower id)
//   w     u of the chosen; renormalize: w / (sum of the chosen w + 1e-20); then times
//         routed_scaling_factor; written as fp32
//
// Every comparison is one strict order over (key, -id), so the warp reductions (butterflies)
// end with the same winner on every lane whatever the order of their steps: deterministic.
#pragma once

#include "kiln/common/numeric.cuh"
#include "kiln/moe/moe_contract.h"

namespace kiln {
namespace moe {

constexpr unsigned kFullWarp = 0xffffffffu;

__device__ __forceinline__ double NegInf() {
  return __longlong_as_double(static_cast<long long>(0xfff0000000000000ull));
}
__device__ __forceinline__ float NegInfF() { return __int_as_float(static_cast<int>(0xff800000u)); }

// Does (ka, ia) rank before (kb, ib)? An id < 0 is no candidate and ranks after everything.
__device__ __forceinline__ bool RanksBefore(double ka, int ia, double kb, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  return ka > kb || (ka == kb && ia < ib);
}

// The warp's first (key, id) in that order, on every lane.
__device__ __forceinline__ void WarpFirst(double& key, int& id) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const double other_key = __shfl_xor_sync(kFullWarp, key, offset);
    const int other_id = __shfl_xor_sync(kFullWarp, id, offset);
    if (RanksBefore(other_key, other_id, key, id)) {
      key = other_key;
      id = other_id;
    }
  }
}

__device__ __forceinline__ double WarpSum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

__device__ __forceinline__ double RankKey(double key) { return key != key ? NegInf() : key; }

// Routes token `t` with the whole warp (lane `lane`). `group_keys` is the warp's scratch of
// kSlots * 32 doubles (used when n_group > 1).
template <typename T, bool kSigmoid, int kSlots>
__device__ __forceinline__ void RouteToken(const MoeRouteParams& p, long long t, int lane, double* group_keys) {
  const T* row = static_cast<const T*>(p.logits) + t * p.logits_stride;
  const int experts = p.experts;
  double u[kSlots];    // the unbiased score
  double key[kSlots];  // the ranking key

  float x[kSlots];
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int e = lane + 32 * j;
    x[j] = e < experts ? ToFloat(row[e]) : NegInfF();
  }
  if (kSigmoid) {
#pragma unroll
    for (int j = 0; j < kSlots; ++j) u[j] = 1.0 / (1.0 + exp(-static_cast<double>(x[j])));
  } else {
    float m = x[0];
#pragma unroll
    for (int j = 1; j < kSlots; ++j) m = fmaxf(m, x[j]);
    m = WarpMax(m);
    double sum = 0;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int e = lane + 32 * j;
      u[j] = e < experts ? exp(static_cast<double>(x[j]) - static_cast<double>(m)) : 0.0;
      sum += u[j];
    }
    sum = WarpSum(sum);
#pragma unroll
    for (int j = 0; j < kSlots; ++j) u[j] = u[j] / sum;
  }
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int e = lane + 32 * j;
    const double bias = p.correction_bias != nullptr && e < experts ? p.correction_bias[e] : 0.0;
    key[j] = RankKey(u[j] + bias);
  }

  // The group limit: a bit per kept group.
  unsigned kept_groups = ~0u;
  int group_size = experts;
  if (p.n_group > 1) {
    group_size = experts / p.n_group;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int e = lane + 32 * j;
      if (e < experts) group_keys[e] = key[j];
    }
    __syncwarp();
    double group_score = 0;
    int group_id = -1;
    if (lane < p.n_group) {
      double first = NegInf(), second = NegInf();
      for (int i = lane * group_size; i < (lane + 1) * group_size; ++i) {
        const double k = group_keys[i];
        if (k > first) {
          second = first;
          first = k;
        } else if (k > second) {
          second = k;
        }
      }
      group_score = RankKey(group_size >= 2 ? first + second : first);
      group_id = lane;
    }
    __syncwarp();  // the scratch is free for the warp's next token
    kept_groups = 0;
    for (int g = 0; g < p.topk_group; ++g) {
      double best_key = group_score;
      int best_id = group_id;
      WarpFirst(best_key, best_id);
      kept_groups |= 1u << best_id;
      if (lane == best_id) group_id = -1;
    }
  }
  // A bit per slot of this lane that may still be chosen: a real expert of a kept group.
  unsigned open = 0;
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int e = lane + 32 * j;
    if (e < experts && ((kept_groups >> (e / group_size)) & 1u) != 0) open |= 1u << j;
  }

  // top_k rounds: lane k keeps the k-th choice.
  int my_id = -1;
  double my_u = 0;
  for (int k = 0; k < p.top_k; ++k) {
    double best_key = NegInf();
    int best_id = -1;
    double best_u = 0;  // u of this lane's best: the chosen u on the lane that wins
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const int e = lane + 32 * j;
      if (((open >> j) & 1u) != 0 && RanksBefore(key[j], e, best_key, best_id)) {
        best_key = key[j];
        best_id = e;
        best_u = u[j];
      }
    }
    WarpFirst(best_key, best_id);
    // best_id >= 0: the client checked top_k <= the experts of the kept groups.
    const int owner = best_id & 31;
    if (lane == owner) open &= ~(1u << (best_id >> 5));
    const double chosen_u = __shfl_sync(kFullWarp, best_u, owner);
    if (lane == k) {
      my_id = best_id;
      my_u = chosen_u;
    }
  }

  const double chosen_sum = WarpSum(lane < p.top_k ? my_u : 0.0);
  if (lane < p.top_k) {
    double w = p.renormalize ? my_u / (chosen_sum + 1e-20) : my_u;
    w *= p.routed_scaling_factor;
    p.topk_ids[t * p.ids_stride + lane] = my_id;
    p.topk_weights[t * p.weights_stride + lane] = static_cast<float>(w);
  }
}

}  // namespace moe
}  // namespace kiln
