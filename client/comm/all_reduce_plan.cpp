#include "client/comm/all_reduce_plan.h"

#include "kiln/comm/comm_contract.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/row_view.h"

namespace kiln::client::comm {
namespace {

bool IsReduceDType(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

// A tensor seen as [rows, hidden] whose rows are back to back (one dense span).
StatusOr<RowView> DenseRows(const TensorView& t, const char* name) {
  KILN_ASSIGN_OR_RETURN(auto v, ViewAsRows(t, name));
  if (v.rows > 1 && v.row_stride != v.hidden)
    return InvalidArgument(std::string(name) + ": expected a dense (contiguous) tensor, found " + t.Describe());
  return v;
}

Status SameShape(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name) {
  bool same = a.ndim == b.ndim;
  for (int d = 0; same && d < a.ndim; ++d) same = a.shape[d] == b.shape[d];
  if (!same)
    return InvalidArgument(std::string(b_name) + ": expected shape " + ShapeText(a) + " (" + a_name + "'s), found " +
                           ShapeText(b));
  if (b.dtype != a.dtype)
    return InvalidArgument(std::string(b_name) + ": expected dtype " + DTypeName(a.dtype) + " (" + a_name +
                           "'s), found " + DTypeName(b.dtype));
  return CheckSameDevice(b, b_name, a.device, a_name);
}

Status CheckDType(const TensorView& t, const char* name) {
  if (!IsReduceDType(t.dtype))
    return InvalidArgument(std::string(name) + ": dtype " + DTypeName(t.dtype) +
                           " is not supported; expected fp32, fp16 or bf16");
  return OkStatus();
}

}  // namespace

StatusOr<AllReducePlan> PlanAllReduce(const TensorView& out, const TensorView& in) {
  KILN_ASSIGN_OR_RETURN(auto i, DenseRows(in, "in"));
  KILN_ASSIGN_OR_RETURN(auto o, DenseRows(out, "out"));
  KILN_RETURN_IF_ERROR(CheckDType(in, "in"));
  KILN_RETURN_IF_ERROR(SameShape(in, "in", out, "out"));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(o, i, /*same_is_ok=*/true));
  AllReducePlan plan;
  plan.dtype = in.dtype;
  plan.element_size = DTypeSize(in.dtype);
  plan.device = in.device.index;
  plan.n = in.numel();
  plan.in = i.data;
  plan.out = o.data;
  return plan;
}

StatusOr<AddRmsNormPlan> PlanAddRmsNorm(const TensorView& out, const TensorView& in, const TensorView& residual,
                                        const TensorView& weight, double eps) {
  KILN_ASSIGN_OR_RETURN(auto i, DenseRows(in, "in"));
  KILN_ASSIGN_OR_RETURN(auto o, DenseRows(out, "out"));
  KILN_ASSIGN_OR_RETURN(auto r, DenseRows(residual, "residual"));
  KILN_RETURN_IF_ERROR(CheckDType(in, "in"));
  KILN_RETURN_IF_ERROR(SameShape(in, "in", out, "out"));
  KILN_RETURN_IF_ERROR(SameShape(in, "in", residual, "residual"));
  if (weight.ndim != 1)
    return InvalidArgument("weight: expected a 1-D tensor [hidden] = [" + std::to_string(i.hidden) + "], found rank " +
                           std::to_string(weight.ndim));
  KILN_ASSIGN_OR_RETURN(auto w, DenseRows(weight, "weight"));
  if (weight.dtype != in.dtype)
    return InvalidArgument(std::string("weight: expected dtype ") + DTypeName(in.dtype) + " (in's), found " +
                           DTypeName(weight.dtype));
  KILN_RETURN_IF_ERROR(CheckSameDevice(weight, "weight", in.device, "in"));
  if (in.numel() > 0 && (i.hidden < 1 || i.hidden > int64_t{::kiln::comm::kMaxAddRmsNormHidden}))
    return InvalidArgument("in: hidden size (the last dim) must be 1 to " +
                           std::to_string(int64_t{::kiln::comm::kMaxAddRmsNormHidden}) + ", found " +
                           std::to_string(i.hidden) + " in shape " + ShapeText(in));
  if (w.hidden != i.hidden)
    return InvalidArgument("weight: expected shape [" + std::to_string(i.hidden) + "] (in's hidden size), found " +
                           ShapeText(weight));
  if (!std::isfinite(eps) || eps <= 0 || !std::isfinite(static_cast<float>(eps)) || static_cast<float>(eps) <= 0)
    return InvalidArgument("eps: expected a finite float > 0, found " + NumberText(eps));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(o, i, /*same_is_ok=*/true));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(r, i, false));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(r, o, false));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(r, w, false));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(o, w, false));

  AddRmsNormPlan plan;
  plan.dtype = in.dtype;
  plan.element_size = DTypeSize(in.dtype);
  plan.device = in.device.index;
  plan.rows = i.rows;
  plan.hidden = i.hidden;
  plan.eps = static_cast<float>(eps);
  plan.in = i.data;
  plan.residual = r.data;
  plan.weight = w.data;
  plan.out = o.data;
  return plan;
}

int AlignedVec(size_t element_size, std::initializer_list<uintptr_t> addresses) {
  if (element_size == 0 || element_size > 16) return 1;
  int vec = static_cast<int>(16 / element_size);
  for (; vec > 1; vec /= 2) {
    const uintptr_t bytes = static_cast<uintptr_t>(vec) * element_size;
    bool aligned = true;
    for (uintptr_t a : addresses) aligned = aligned && a % bytes == 0;
    if (aligned) break;
  }
  return vec;
}

::kiln::comm::AllReduceAlgorithm ResolveAlgorithm(::kiln::comm::AllReduceAlgorithm requested, size_t bytes,
                                                  int world_size) {
  if (requested != ::kiln::comm::AllReduceAlgorithm::kAuto) return requested;
  return ::kiln::comm::ChooseAllReduceAlgorithm(bytes, world_size);
}

}  // namespace kiln::client::comm
