// RopePlan: the arguments of apply_rope / apply_rope_with_cos_sin_cache, validated and turned
// into what the kernel takes (pointers, strides in elements, angle parameters) and the
// specialization it needs (dtype, rotary_dim, style, positions dtype, vec). Pure: no driver
// call, so every check runs — and is tested — without a GPU.
#pragma once

#include <cstdint>

#include "kiln/ops/rope.h"
#include "kiln/rope/rope_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// Threads a launch aims at (about 128 SMs x 2048): below it, heads are split into groups
// over grid.y so that few tokens still spread over the GPU (RopeHeadGroups).
inline constexpr int64_t kRopeTargetThreads = int64_t{1} << 18;

enum class RopeOp : uint8_t { kApplyRope, kApplyRopeWithCosSinCache };

struct RopePlan {
  RopeOp op = RopeOp::kApplyRope;
  const char* api = "";  // the caller's name for messages: "kiln::ops::apply_rope", "kiln_apply_rope"
  DType dtype = DType::kBFloat16;
  DType pos_dtype = DType::kInt64;
  int device = 0;
  int64_t tokens = 0;
  int64_t q_heads = 0;
  int64_t k_heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;
  bool interleaved = false;
  int vec = 1;
  void* q = nullptr;
  void* k = nullptr;
  const void* positions = nullptr;
  int64_t q_token_stride = 0;  // elements; a dim of size 1 has whatever stride its view had
  int64_t q_head_stride = 0;
  int64_t k_token_stride = 0;
  int64_t k_head_stride = 0;
  // apply_rope: log2(theta) and the Llama-3.1 scaling (factor 0: none).
  double log2_theta = 0;
  double factor = 0;
  double low_freq_factor = 0;
  double high_freq_factor = 0;
  double original_max_position = 0;
  // apply_rope_with_cos_sin_cache.
  const void* cos_sin_cache = nullptr;
  int64_t max_position = 0;
  int64_t cache_stride = 0;  // floats between rows
};

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
// `api` must outlive the plan (a string literal). A call with the layouts and scalars of one
// this thread accepted recently reruns only the pointer checks (plan_memo.h); the answer is
// the same.
StatusOr<RopePlan> PlanApplyRope(const TensorView& q, const TensorView& k, const TensorView& positions,
                                 const ops::RopeOptions& options, const char* api);
StatusOr<RopePlan> PlanApplyRopeWithCosSinCache(const TensorView& q, const TensorView& k, const TensorView& positions,
                                                const TensorView& cos_sin_cache, bool interleaved, const char* api);
// The same with every check run, and nothing remembered: what the tests compare the memo with.
StatusOr<RopePlan> PlanRopeFully(const TensorView& q, const TensorView& k, const TensorView& positions,
                                 const ops::RopeOptions& options, const char* api);
StatusOr<RopePlan> PlanRopeWithCosSinCacheFully(const TensorView& q, const TensorView& k, const TensorView& positions,
                                                const TensorView& cos_sin_cache, bool interleaved, const char* api);

// grid.y of a launch: how many groups the q_heads + k_heads heads are split into (a thread
// rotates ceil(heads / groups) heads of one token with one cos/sin computation). As many
// heads per thread as keep at least kRopeTargetThreads threads busy, then groups =
// ceil(heads / heads_per_thread), at most kMaxGridY: one token gets every head its own
// group (lowest latency), 16384 Llama-3.1-8B tokens (8 threads each, 40 heads) get 2.
int64_t RopeHeadGroups(int64_t tokens, int64_t threads_per_token, int64_t heads);

}  // namespace kiln::client
