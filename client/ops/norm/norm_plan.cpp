#include "client/ops/norm/norm_plan.h"

#include <cmath>
#include <span>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/plan_memo.h"
#include "client/ops/row_view.h"
#include "client/ops/vec_width.h"

namespace kiln::client {
namespace {

bool IsNormDType(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

// The rows of a norm call: x defines dtype, shape and device (input); y must match it exactly
// (out, or residual); w is the weight.
struct NormRows {
  RowView x;
  RowView y;
  RowView w;
};

// The pairs of rows that must not overlap (the written ones against the others), the same for
// Plan and the memo's repeat call: {a, b, same_is_ok}.
struct OverlapRule {
  RowView NormRows::*a;
  RowView NormRows::*b;
  bool same_is_ok;
};
constexpr OverlapRule kRmsNormOverlaps[] = {{&NormRows::y, &NormRows::x, true},  // out vs input
                                            {&NormRows::y, &NormRows::w, false}};
constexpr OverlapRule kFusedAddRmsNormOverlaps[] = {{&NormRows::x, &NormRows::y, false},  // input vs residual
                                                    {&NormRows::x, &NormRows::w, false},
                                                    {&NormRows::y, &NormRows::w, false}};

std::span<const OverlapRule> OverlapRules(NormOp op) {
  if (op == NormOp::kRmsNorm) return kRmsNormOverlaps;
  return kFusedAddRmsNormOverlaps;
}

bool AnyOverlap(NormOp op, const NormRows& r) {
  for (const OverlapRule& o : OverlapRules(op))
    if (RowsOverlap(r.*o.a, r.*o.b, o.same_is_ok)) return true;
  return false;
}

// The plan's pointers from the rows: a, b as NormPlan says.
void BindPointers(const NormRows& r, NormPlan& plan) {
  plan.weight = r.w.data;
  const bool rms = plan.op == NormOp::kRmsNorm;
  plan.a = rms ? r.y.data : r.x.data;
  plan.b = rms ? r.x.data : r.y.data;
}

// The vector width the plan's layout allows (hidden and the row strides), before the pointers
// narrow it: the first half of the choice, which a repeat layout keeps (PlanMemo).
int LayoutVecWidth(const NormPlan& plan, size_t element_size) {
  return plan.rows > 0 ? ChooseVecWidth(element_size, plan.hidden, {plan.a_stride, plan.b_stride}, {}) : 1;
}

// The checks both ops share; the rows they viewed go to `r` (for the memo).
StatusOr<NormPlan> Plan(NormOp op, const TensorView& x_t, const char* x_name, const TensorView& y_t, const char* y_name,
                        const TensorView& w_t, double eps, NormRows& r) {
  RowView& x = r.x;
  KILN_RETURN_IF_ERROR(ViewAsRowsInto(x_t, x_name, &x));
  RowView& y = r.y;
  KILN_RETURN_IF_ERROR(ViewAsRowsInto(y_t, y_name, &y));
  if (w_t.ndim != 1)
    return InvalidArgument("weight: expected a 1-D tensor [hidden] = [" + std::to_string(x.hidden) + "], found rank " +
                           std::to_string(w_t.ndim) +
                           (w_t.ndim >= 1 && w_t.ndim <= kMaxTensorDims ? " " + ShapeText(w_t) : ""));
  RowView& w = r.w;
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
  for (const OverlapRule& o : OverlapRules(op)) KILN_RETURN_IF_ERROR(CheckNoOverlap(r.*o.a, r.*o.b, o.same_is_ok));

  NormPlan plan;
  plan.op = op;
  plan.dtype = x_t.dtype;
  plan.device = x_t.device.index;
  plan.rows = x.rows;
  plan.hidden = x.hidden;
  plan.eps = eps_f;
  plan.a_stride = op == NormOp::kRmsNorm ? y.row_stride : x.row_stride;
  plan.b_stride = op == NormOp::kRmsNorm ? x.row_stride : y.row_stride;
  BindPointers(r, plan);
  plan.vec = NarrowVecWidthToPointers(LayoutVecWidth(plan, x.element_size), x.element_size,
                                      {plan.a, plan.b, plan.weight});
  return plan;
}

// A call Plan accepted (its op is the plan's): its layouts and eps (as given: the plan keeps it
// as a float), its rows, the plan, and LayoutVecWidth of it (PlanMemo).
struct AcceptedCall {
  double eps = 0;
  TensorLayout x_layout;
  TensorLayout y_layout;
  TensorLayout w_layout;
  NormRows rows;
  NormPlan plan;
  int layout_vec = 1;
};

// Plan, or the plan of a remembered call with these layouts and eps once the pointer checks
// pass again. x, y as Plan takes them.
StatusOr<NormPlan> PlanWithMemo(NormOp op, const TensorView& x_t, const char* x_name, const TensorView& y_t,
                                const char* y_name, const TensorView& w_t, double eps, const char* api) {
  thread_local PlanMemo<AcceptedCall> memo;
  AcceptedCall* seen = memo.Find([&](const AcceptedCall& c) {
    return c.plan.op == op && c.eps == eps && c.x_layout.Matches(x_t) && c.y_layout.Matches(y_t) &&
           c.w_layout.Matches(w_t);
  });
  if (seen != nullptr && seen->rows.x.Rebind(x_t) && seen->rows.y.Rebind(y_t) && seen->rows.w.Rebind(w_t) &&
      !AnyOverlap(op, seen->rows)) {
    NormPlan plan = seen->plan;
    BindPointers(seen->rows, plan);
    plan.vec = NarrowVecWidthToPointers(seen->layout_vec, seen->rows.x.element_size, {plan.a, plan.b, plan.weight});
    plan.api = api;
    return plan;
  }
  NormRows rows;
  auto plan = Plan(op, x_t, x_name, y_t, y_name, w_t, eps, rows);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  memo.Next() = AcceptedCall{eps,
                             TensorLayout::Of(x_t),
                             TensorLayout::Of(y_t),
                             TensorLayout::Of(w_t),
                             rows,
                             *plan,
                             LayoutVecWidth(*plan, rows.x.element_size)};
  return plan;
}

}  // namespace

StatusOr<NormPlan> PlanRmsNorm(const TensorView& out, const TensorView& input, const TensorView& weight, double eps,
                               const char* api) {
  return PlanWithMemo(NormOp::kRmsNorm, input, "input", out, "out", weight, eps, api);
}

StatusOr<NormPlan> PlanFusedAddRmsNorm(const TensorView& input, const TensorView& residual, const TensorView& weight,
                                       double eps, const char* api) {
  return PlanWithMemo(NormOp::kFusedAddRmsNorm, input, "input", residual, "residual", weight, eps, api);
}

StatusOr<NormPlan> PlanNormFully(NormOp op, const TensorView& a, const TensorView& b, const TensorView& weight,
                                 double eps, const char* api) {
  // a, b in the order of the op's arguments: (out, input) or (input, residual).
  const bool rms = op == NormOp::kRmsNorm;
  NormRows rows;
  auto plan = rms ? Plan(op, b, "input", a, "out", weight, eps, rows)
                  : Plan(op, a, "input", b, "residual", weight, eps, rows);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

}  // namespace kiln::client
