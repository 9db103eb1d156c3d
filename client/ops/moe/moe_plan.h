// MoeRoutePlan: the arguments of moe_route (kiln/ops/moe.h) validated and turned into what the
// kernel takes (kiln::moe::MoeRouteParams) and the specialization it needs (logits' dtype, the
// scoring, max_experts). Pure: no driver call, so every check runs, and is tested, without a
// GPU.
#pragma once

#include <cstdint>

#include "kiln/moe/moe_contract.h"
#include "kiln/ops/moe.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// The arguments as the API receives them; `scoring` as an integer, since the C ABI may pass
// any value (checked here).
struct MoeRouteArgs {
  const TensorView* topk_ids = nullptr;
  const TensorView* topk_weights = nullptr;
  const TensorView* logits = nullptr;
  const TensorView* correction_bias = nullptr;  // optional
  int scoring = 0;                              // ops::MoeScoring
  bool renormalize = true;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
};

struct MoeRoutePlan {
  DType dtype = DType::kFloat32;  // logits'
  bool sigmoid = false;
  int max_experts = 32;  // the specialization: the smallest of 32, 64, 128, 256 holding E
  int device = 0;
  moe::MoeRouteParams params = {};
};

// The smallest max_experts specialization that holds `experts` (1..kMaxExperts).
int MaxExpertsFor(int64_t experts);

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
StatusOr<MoeRoutePlan> PlanMoeRoute(const MoeRouteArgs& args, const char* api);

}  // namespace kiln::client
