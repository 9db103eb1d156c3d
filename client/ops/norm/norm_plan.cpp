#include "client/ops/norm/norm_plan.h"

#include <cmath>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/row_view.h"
#include "client/ops/vec_width.h"

namespace kiln::client {
namespace {

bool IsNormDType(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

// The checks both ops share. `x` is the tensor that defines dtype, shape and device (input);
// `y` must match it exactly (out, or residual).
StatusOr<NormPlan> Plan(NormOp op, const TensorView& x_t, const char* x_name, const TensorView& y_t, const char* y_name,
                        const TensorView& w_t, double eps) {
  RowView x;
  KILN_RETURN_IF_ERROR(ViewAsRowsInto(x_t, x_name, &x));
  RowView y;
  KILN_RETURN_IF_ERROR(ViewAsRowsInto(y_t, y_name, &y));
  if (w_t.ndim != 1)
    return InvalidArgument("weight: expected a 1-D tensor [hidden] = [" + std::to_string(x.hidden) + "], found rank " +
                           std::to_string(w_t.ndim) +
                           (w_t.ndim >= 1 && w_t.ndim <= kMaxTensorDims ? " " + ShapeText(w_t) : ""));
  RowView w;
  KILN_RETURN_IF_ERROR(ViewAsRowsInto(w_t, "weight", &w));

  if (!IsNormDType(x_t.dtype))
    return InvalidArgument(std::string(x_name) + ": dtype " + DTypeName(x_t.dtype) +
                           " is not supported; expected fp32, fp16 or bf16");
  if (y_t.dtype != x_t.dtype)
    return InvalidArgument(std::string(y_name) + ": expected dtype " + DTypeName(x_t.dtype) + " (" + x_name +
                           "'s), found " + DTypeName(y_t.dtype));
  if (w_t.dtype != x_t.dtype)
    return InvalidArgument(std::string("weight: expected dtype ") + DTypeName(x_t.dtype) + " (" + x_name +
                           "'s), found " + DTypeName(w_t.dtype));

  bool same_shape = y_t.ndim == x_t.ndim;
  for (int d = 0; same_shape && d < x_t.ndim; ++d) same_shape = y_t.shape[d] == x_t.shape[d];
  if (!same_shape)
    return InvalidArgument(std::string(y_name) + ": expected shape " + ShapeText(x_t) + " (" + x_name + "'s), found " +
                           ShapeText(y_t));
  if (x.hidden < 1 || x.hidden > norm::kMaxHidden)
    return InvalidArgument(std::string(x_name) + ": hidden size (the last dim) must be 1 to " +
                           std::to_string(norm::kMaxHidden) + ", found " + std::to_string(x.hidden) + " in shape " +
                           ShapeText(x_t));
  if (w.hidden != x.hidden)
    return InvalidArgument("weight: expected shape [" + std::to_string(x.hidden) + "] (" + x_name +
                           "'s hidden size), found " + ShapeText(w_t));

  for (const RowView* v : {&y, &w}) KILN_RETURN_IF_ERROR(CheckSameDevice(*v->tensor, v->name, x_t.device, x_name));

  if (!std::isfinite(eps) || eps <= 0)
    return InvalidArgument("eps: expected a finite value > 0, found " + NumberText(eps));
  const float eps_f = static_cast<float>(eps);
  if (!std::isfinite(eps_f) || eps_f <= 0)
    return InvalidArgument("eps: " + NumberText(eps) +
                           " is not a positive finite float (the kernel computes in float)");

  // Rows that are written must not overlap each other.
  const RowView* written[2] = {op == NormOp::kRmsNorm ? &y : &x, &y};
  for (const RowView* v : written) {
    if (v->rows > 1 && v->row_stride < v->hidden)
      return InvalidArgument(std::string(v->name) + ": its rows overlap (row stride " + std::to_string(v->row_stride) +
                             " < hidden " + std::to_string(v->hidden) +
                             "); a tensor the op writes needs a row stride of at least hidden");
  }
  if (op == NormOp::kRmsNorm) {
    KILN_RETURN_IF_ERROR(CheckNoOverlap(y, x, /*same_is_ok=*/true));  // out vs input
    KILN_RETURN_IF_ERROR(CheckNoOverlap(y, w, false));
  } else {
    KILN_RETURN_IF_ERROR(CheckNoOverlap(x, y, false));  // input vs residual
    KILN_RETURN_IF_ERROR(CheckNoOverlap(x, w, false));
    KILN_RETURN_IF_ERROR(CheckNoOverlap(y, w, false));
  }

  NormPlan plan;
  plan.op = op;
  plan.dtype = x_t.dtype;
  plan.device = x_t.device.index;
  plan.rows = x.rows;
  plan.hidden = x.hidden;
  plan.eps = eps_f;
  plan.weight = w.data;
  if (op == NormOp::kRmsNorm) {
    plan.a = y.data;  // out
    plan.b = x.data;  // input
    plan.a_stride = y.row_stride;
    plan.b_stride = x.row_stride;
  } else {
    plan.a = x.data;  // input
    plan.b = y.data;  // residual
    plan.a_stride = x.row_stride;
    plan.b_stride = y.row_stride;
  }
  if (plan.rows > 0)
    plan.vec = ChooseVecWidth(x.element_size, plan.hidden, {plan.a_stride, plan.b_stride},
                              {plan.a, plan.b, plan.weight});
  return plan;
}

}  // namespace

StatusOr<NormPlan> PlanRmsNorm(const TensorView& out, const TensorView& input, const TensorView& weight, double eps,
                               const char* api) {
  auto plan = Plan(NormOp::kRmsNorm, input, "input", out, "out", weight, eps);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

StatusOr<NormPlan> PlanFusedAddRmsNorm(const TensorView& input, const TensorView& residual, const TensorView& weight,
                                       double eps, const char* api) {
  auto plan = Plan(NormOp::kFusedAddRmsNorm, input, "input", residual, "residual", weight, eps);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

}  // namespace kiln::client
