#include "client/ops/activation/activation_plan.h"

#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/plan_memo.h"
#include "client/ops/row_view.h"
#include "client/ops/vec_width.h"

namespace kiln::client {
namespace {

// input's shape with the last dim halved: what out must be.
std::string HalvedShapeText(const TensorView& input, int64_t d) {
  std::string s = "[";
  for (int i = 0; i < input.ndim; ++i) s += (i ? ", " : "") + std::to_string(i + 1 == input.ndim ? d : input.shape[i]);
  return s + "]";
}

// The vector width the plan's layout allows (d and the row strides), before the pointers narrow
// it: the first half of the choice, which a repeat layout keeps (PlanMemo).
int LayoutVecWidth(const ActivationPlan& plan, size_t element_size) {
  return plan.rows > 0 ? ChooseVecWidth(element_size, plan.d, {plan.out_stride, plan.in_stride}, {}) : 1;
}

// A call Plan accepted (its op is the plan's): its layouts, its rows, the plan, and
// LayoutVecWidth of it (PlanMemo).
struct AcceptedCall {
  TensorLayout out_layout;
  TensorLayout in_layout;
  RowView out;
  RowView in;
  ActivationPlan plan;
  int layout_vec = 1;
};

// Every check; the rows it viewed go to `out` and `in` (for the memo).
StatusOr<ActivationPlan> Plan(ActivationOp op, const TensorView& out_t, const TensorView& in_t, RowView& out,
                              RowView& in) {
  KILN_RETURN_IF_ERROR(ViewAsRowsInto(in_t, "input", &in));
  KILN_RETURN_IF_ERROR(ViewAsRowsInto(out_t, "out", &out));

  if (in_t.dtype != DType::kFloat16 && in_t.dtype != DType::kBFloat16)
    return InvalidArgument(std::string("input: dtype ") + DTypeName(in_t.dtype) +
                           " is not supported; expected fp16 or bf16");
  if (out_t.dtype != in_t.dtype)
    return InvalidArgument(std::string("out: expected dtype ") + DTypeName(in_t.dtype) + " (input's), found " +
                           DTypeName(out_t.dtype));

  if (in.hidden < 2 || in.hidden % 2 != 0)
    return InvalidArgument("input: the last dim must be 2d, even and at least 2 (x = the first d columns, "
                           "y = the last d), found " +
                           std::to_string(in.hidden) + " in shape " + ShapeText(in_t));
  const int64_t d = in.hidden / 2;
  if (d > activation::kMaxD)
    return InvalidArgument("input: d (half the last dim) must be at most " + std::to_string(activation::kMaxD) +
                           ", found " + std::to_string(d) + " in shape " + ShapeText(in_t));

  bool same_shape = out_t.ndim == in_t.ndim && out.hidden == d;
  for (int i = 0; same_shape && i + 1 < in_t.ndim; ++i) same_shape = out_t.shape[i] == in_t.shape[i];
  if (!same_shape)
    return InvalidArgument("out: expected shape " + HalvedShapeText(in_t, d) +
                           " (input's leading dims, last dim d = half of input's), found " + ShapeText(out_t));

  KILN_RETURN_IF_ERROR(CheckSameDevice(out_t, "out", in_t.device, "input"));

  if (out.rows > 1 && out.row_stride < d)
    return InvalidArgument("out: its rows overlap (row stride " + std::to_string(out.row_stride) + " < d " +
                           std::to_string(d) + "); the op writes out, so its row stride must be at least d");
  // The kernel reads input through the read-only cache while it writes out.
  KILN_RETURN_IF_ERROR(CheckNoOverlap(out, in, /*same_is_ok=*/false));

  ActivationPlan plan;
  plan.op = op;
  plan.dtype = in_t.dtype;
  plan.device = in_t.device.index;
  plan.rows = in.rows;
  plan.d = d;
  plan.out = out.data;
  plan.input = in.data;
  plan.out_stride = out.row_stride;
  plan.in_stride = in.row_stride;
  plan.vec = NarrowVecWidthToPointers(LayoutVecWidth(plan, in.element_size), in.element_size, {plan.out, plan.input});
  return plan;
}

}  // namespace

StatusOr<ActivationPlan> PlanActAndMul(ActivationOp op, const TensorView& out, const TensorView& input,
                                       const char* api) {
  thread_local PlanMemo<AcceptedCall> memo;
  AcceptedCall* seen = memo.Find([&](const AcceptedCall& c) {
    return c.plan.op == op && c.in_layout.Matches(input) && c.out_layout.Matches(out);
  });
  if (seen != nullptr && seen->out.Rebind(out) && seen->in.Rebind(input) &&
      !RowsOverlap(seen->out, seen->in, /*same_is_ok=*/false)) {
    ActivationPlan plan = seen->plan;
    plan.out = seen->out.data;
    plan.input = seen->in.data;
    plan.vec = NarrowVecWidthToPointers(seen->layout_vec, seen->in.element_size, {plan.out, plan.input});
    plan.api = api;
    return plan;
  }
  RowView out_rows;
  RowView in_rows;
  auto plan = Plan(op, out, input, out_rows, in_rows);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  memo.Next() = AcceptedCall{TensorLayout::Of(out),
                             TensorLayout::Of(input),
                             out_rows,
                             in_rows,
                             *plan,
                             LayoutVecWidth(*plan, in_rows.element_size)};
  return plan;
}

StatusOr<ActivationPlan> PlanActAndMulFully(ActivationOp op, const TensorView& out, const TensorView& input,
                                            const char* api) {
  RowView out_rows;
  RowView in_rows;
  auto plan = Plan(op, out, input, out_rows, in_rows);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

}  // namespace kiln::client
