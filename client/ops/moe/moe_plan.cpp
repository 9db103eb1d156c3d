#include "client/ops/moe/moe_plan.h"

#include <cmath>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/row_view.h"

namespace kiln::client {
namespace {

std::string RankText(const TensorView& t) {
  return std::to_string(t.ndim) + (t.ndim >= 1 && t.ndim <= kMaxTensorDims ? " " + ShapeText(t) : "");
}

// An output [tokens, top_k] of `dtype`: rank, dtype, rows, then the row view.
StatusOr<RowView> OutputRows(const TensorView& t, const char* name, DType dtype, int64_t tokens) {
  if (t.ndim != 2) return InvalidArgument(name, "expected a 2-D tensor [T, top_k], found rank " + RankText(t));
  if (t.dtype != dtype)
    return InvalidArgument(name, std::string("expected dtype ") + DTypeName(dtype) + ", found " + DTypeName(t.dtype));
  if (t.shape[0] != tokens)
    return InvalidArgument(name, "expected " + std::to_string(tokens) + " rows (logits' tokens), found shape " +
                                     ShapeText(t));
  return ViewAsRows(t, name);
}

StatusOr<MoeRoutePlan> Plan(const MoeRouteArgs& a) {
  if (a.topk_ids == nullptr || a.topk_weights == nullptr || a.logits == nullptr)
    return Status(StatusCode::kInternal, "PlanMoeRoute: topk_ids, topk_weights and logits must be given");
  const TensorView& logits_t = *a.logits;

  if (logits_t.ndim != 2)
    return InvalidArgument("logits", "expected a 2-D tensor [T, E], found rank " + RankText(logits_t));
  if (logits_t.dtype != DType::kFloat32 && logits_t.dtype != DType::kFloat16 && logits_t.dtype != DType::kBFloat16)
    return InvalidArgument("logits",
                           std::string("expected dtype fp32, fp16 or bf16, found ") + DTypeName(logits_t.dtype));
  KILN_ASSIGN_OR_RETURN(const RowView logits, ViewAsRows(logits_t, "logits"));
  const int64_t tokens = logits_t.shape[0];
  const int64_t experts = logits_t.shape[1];
  if (experts < 1 || experts > moe::kMaxExperts)
    return InvalidArgument("logits", "the number of experts (dim 1) must be 1 to " + std::to_string(moe::kMaxExperts) +
                                         ", found " + std::to_string(experts) + " in shape " + ShapeText(logits_t));

  KILN_ASSIGN_OR_RETURN(const RowView ids, OutputRows(*a.topk_ids, "topk_ids", DType::kInt32, tokens));
  KILN_ASSIGN_OR_RETURN(const RowView weights, OutputRows(*a.topk_weights, "topk_weights", DType::kFloat32, tokens));
  const int64_t top_k = a.topk_ids->shape[1];
  if (a.topk_weights->shape[1] != top_k)
    return InvalidArgument("topk_weights", "expected shape " + ShapeText(*a.topk_ids) + " (topk_ids'), found " +
                                               ShapeText(*a.topk_weights));
  if (top_k < 1 || top_k > moe::kMaxTopK)
    return InvalidArgument("topk_ids", "top_k (dim 1) must be 1 to " + std::to_string(moe::kMaxTopK) + ", found " +
                                           std::to_string(top_k));
  if (top_k > experts)
    return InvalidArgument("topk_ids", "top_k (dim 1) = " + std::to_string(top_k) + " exceeds the " +
                                           std::to_string(experts) + " experts of logits " + ShapeText(logits_t));
  KILN_RETURN_IF_ERROR(CheckSameDevice(*a.topk_ids, "topk_ids", logits_t.device, "logits"));
  KILN_RETURN_IF_ERROR(CheckSameDevice(*a.topk_weights, "topk_weights", logits_t.device, "logits"));

  const float* bias = nullptr;
  RowView bias_view;
  if (a.correction_bias != nullptr) {
    const TensorView& b = *a.correction_bias;
    if (b.ndim != 1)
      return InvalidArgument("correction_bias", "expected a 1-D tensor [E] = [" + std::to_string(experts) +
                                                    "], found rank " + RankText(b));
    if (b.dtype != DType::kFloat32)
      return InvalidArgument("correction_bias", std::string("expected dtype fp32, found ") + DTypeName(b.dtype));
    if (b.shape[0] != experts)
      return InvalidArgument("correction_bias", "expected shape [" + std::to_string(experts) +
                                                    "] (logits' experts), found " + ShapeText(b));
    KILN_ASSIGN_OR_RETURN(bias_view, ViewAsRows(b, "correction_bias"));
    KILN_RETURN_IF_ERROR(CheckSameDevice(b, "correction_bias", logits_t.device, "logits"));
    bias = reinterpret_cast<const float*>(bias_view.data);
  }
  for (const RowView* out : {&ids, &weights}) {
    KILN_RETURN_IF_ERROR(CheckNoOverlap(*out, logits, false));
    if (bias != nullptr) KILN_RETURN_IF_ERROR(CheckNoOverlap(*out, bias_view, false));
  }
  KILN_RETURN_IF_ERROR(CheckNoOverlap(ids, weights, false));

  if (a.scoring != static_cast<int>(ops::MoeScoring::kSoftmax) &&
      a.scoring != static_cast<int>(ops::MoeScoring::kSigmoid))
    return InvalidArgument("scoring", "expected 0 (softmax) or 1 (sigmoid), found " + std::to_string(a.scoring));
  if (a.n_group < 1 || a.n_group > moe::kMaxGroups)
    return InvalidArgument("n_group", "expected 1 (no group limit) to " + std::to_string(moe::kMaxGroups) + ", found " +
                                          std::to_string(a.n_group));
  if (experts % a.n_group != 0)
    return InvalidArgument("n_group", "must divide the " + std::to_string(experts) + " experts, found " +
                                          std::to_string(a.n_group));
  if (a.topk_group < 1 || a.topk_group > a.n_group)
    return InvalidArgument("topk_group", "expected 1 to n_group = " + std::to_string(a.n_group) + ", found " +
                                             std::to_string(a.topk_group));
  const int64_t kept = a.topk_group * (experts / a.n_group);
  if (top_k > kept)
    return InvalidArgument("topk_ids", "top_k (dim 1) = " + std::to_string(top_k) + " exceeds the " +
                                           std::to_string(kept) + " experts of the kept groups (topk_group " +
                                           std::to_string(a.topk_group) + " of n_group " + std::to_string(a.n_group) +
                                           " groups of " + std::to_string(experts / a.n_group) + ")");
  if (!(std::isfinite(a.routed_scaling_factor) && a.routed_scaling_factor > 0))
    return InvalidArgument("routed_scaling_factor",
                           "expected a finite value > 0, found " + NumberText(a.routed_scaling_factor));

  MoeRoutePlan plan;
  plan.dtype = logits_t.dtype;
  plan.sigmoid = a.scoring == static_cast<int>(ops::MoeScoring::kSigmoid);
  plan.max_experts = MaxExpertsFor(experts);
  plan.device = logits_t.device.index;
  moe::MoeRouteParams& p = plan.params;
  p.topk_ids = reinterpret_cast<int*>(ids.data);
  p.topk_weights = reinterpret_cast<float*>(weights.data);
  p.logits = logits.data;
  p.correction_bias = bias;
  p.tokens = tokens;
  p.logits_stride = logits.row_stride;
  p.ids_stride = ids.row_stride;
  p.weights_stride = weights.row_stride;
  p.experts = static_cast<int>(experts);
  p.top_k = static_cast<int>(top_k);
  p.n_group = static_cast<int>(a.n_group);
  p.topk_group = static_cast<int>(a.topk_group);
  p.renormalize = a.renormalize ? 1 : 0;
  p.routed_scaling_factor = a.routed_scaling_factor;
  return plan;
}

}  // namespace

int MaxExpertsFor(int64_t experts) {
  int max_experts = 32;
  while (max_experts < experts) max_experts *= 2;
  return max_experts;
}

StatusOr<MoeRoutePlan> PlanMoeRoute(const MoeRouteArgs& args, const char* api) {
  auto plan = Plan(args);
  if (!plan.ok()) return plan.status().WithContext(api);
  return plan;
}

}  // namespace kiln::client
