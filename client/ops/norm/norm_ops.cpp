// The norm family's ops, rms_norm and fused_add_rms_norm (kiln/ops/norm.h): their entries in
// the op table, their launch, and their C++ and C APIs. Validation is norm_plan.h's; the
// kernel contract kiln/norm/norm_contract.h.
#include <climits>

#include "client/core/api/invalid_argument.h"
#include "client/core/capi/c_status.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/norm/norm_ops.h"
#include "client/ops/norm/norm_plan.h"
#include "client/ops/op_table.h"
#include "kiln/norm/norm_contract.h"
#include "kiln/ops/norm.h"

namespace kiln::client {
namespace {

// What selects a kernel: one cubin per (op, dtype, hidden, vec); rows are a launch argument.
struct NormSpec {
  DType dtype = DType::kFloat32;
  int32_t hidden = 0;
  int32_t vec = 1;
  bool operator==(const NormSpec&) const = default;
  auto Fields() const { return std::tie(dtype, hidden, vec); }
  std::map<std::string, std::string> Params() const {
    return {{kParamDType, DTypeName(dtype)},
            {norm::kParamHidden, std::to_string(hidden)},
            {kParamVec, std::to_string(vec)}};
  }
};

const OpKernels kRmsNormKernels = {
    norm::kRmsNormOp,
    {{{.name = norm::kRmsNormEntry, .min_block = 1, .uses_items_per_block = true, .waits_first = true}}}};
const OpKernels kFusedAddRmsNormKernels = {
    norm::kFusedAddRmsNormOp,
    {{{.name = norm::kFusedAddRmsNormEntry, .min_block = 1, .uses_items_per_block = true, .waits_first = true}}}};

// A validated call → the specialization's launch in the caller's context → one launch on the
// caller's stream: grid.x = ceil(rows / rows per block) (the contract's launch rule).
template <typename Params>
Status LaunchNorm(const NormPlan& plan, const OpKernels& kernels, const char* entry, Params params, void* stream) {
  if (plan.rows == 0) return OkStatus();  // nothing to do, and nothing to launch
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready,
                        PrepareOpLaunch(kernels, NormSpec{plan.dtype, static_cast<int32_t>(plan.hidden), plan.vec},
                                        plan.device, plan.api));
  const EntryLaunchReady& e = ready.launch->entry();
  const int64_t grid = (plan.rows + e.items_per_block - 1) / e.items_per_block;
  if (grid > INT_MAX)
    return InvalidArgument(std::string(plan.api) + ": " + std::to_string(plan.rows) +
                           " rows need more than 2^31-1 blocks; split the call");
  const LaunchConfig config = EntryLaunchConfig(e, {static_cast<unsigned>(grid)}, stream);
  void* args[] = {&params};
  return LaunchFunction(*ready.driver, e.function, config, args, entry, &ready.launch->library->info);
}

struct RmsNormArgs {
  const TensorView* out = nullptr;
  const TensorView* input = nullptr;
  const TensorView* weight = nullptr;
  double eps = 0;
  template <typename Self, typename V>
  static void Visit(Self& a, V& v) {
    v.Out("out", a.out).In("input", a.input).In("weight", a.weight).Param("eps", a.eps);
  }
};

Status RunRmsNorm(const RmsNormArgs& a, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const NormPlan plan, PlanRmsNorm(*a.out, *a.input, *a.weight, a.eps, api));
  return LaunchNormPlan(plan, stream);
}

struct FusedAddRmsNormArgs {
  const TensorView* input = nullptr;
  const TensorView* residual = nullptr;
  const TensorView* weight = nullptr;
  double eps = 0;
  template <typename Self, typename V>
  static void Visit(Self& a, V& v) {
    v.InOut("input", a.input).InOut("residual", a.residual).In("weight", a.weight).Param("eps", a.eps);
  }
};

Status RunFusedAddRmsNorm(const FusedAddRmsNormArgs& a, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const NormPlan plan, PlanFusedAddRmsNorm(*a.input, *a.residual, *a.weight, a.eps, api));
  return LaunchNormPlan(plan, stream);
}

const OpDescriptor kRmsNorm = {.name = "rms_norm",
                               .op = norm::kRmsNormOp,
                               .family = "norm",
                               .cpp_api = "kiln::ops::rms_norm",
                               .c_api = "kiln_rms_norm",
                               .invoke = InvokeByVisit<RmsNormArgs, RunRmsNorm>};
const OpDescriptor kFusedAddRmsNorm = {.name = "fused_add_rms_norm",
                                       .op = norm::kFusedAddRmsNormOp,
                                       .family = "norm",
                                       .cpp_api = "kiln::ops::fused_add_rms_norm",
                                       .c_api = "kiln_fused_add_rms_norm",
                                       .invoke = InvokeByVisit<FusedAddRmsNormArgs, RunFusedAddRmsNorm>};
KILN_REGISTER_OP(kRmsNorm);
KILN_REGISTER_OP(kFusedAddRmsNorm);

}  // namespace

Status LaunchNormPlan(const NormPlan& plan, void* stream) {
  // NormPlan: a = out and b = input for rms_norm; a = input and b = residual for the fused op.
  if (plan.op == NormOp::kRmsNorm)
    return LaunchNorm(
        plan, kRmsNormKernels, norm::kRmsNormEntry,
        norm::RmsNormParams{plan.a, plan.b, plan.weight, plan.rows, plan.a_stride, plan.b_stride, plan.eps}, stream);
  return LaunchNorm(plan, kFusedAddRmsNormKernels, norm::kFusedAddRmsNormEntry,
                    norm::FusedAddRmsNormParams{plan.a, plan.b, plan.weight, plan.rows, plan.a_stride, plan.b_stride,
                                                plan.eps},
                    stream);
}

}  // namespace kiln::client

namespace kiln::ops {

Status rms_norm(const TensorView& out, const TensorView& input, const TensorView& weight, double eps, void* stream) {
  return client::CallOp(client::kRmsNorm, client::kRmsNorm.cpp_api, client::RmsNormArgs{&out, &input, &weight, eps},
                        stream, client::RunRmsNorm);
}

Status fused_add_rms_norm(const TensorView& input, const TensorView& residual, const TensorView& weight, double eps,
                          void* stream) {
  return client::CallOp(client::kFusedAddRmsNorm, client::kFusedAddRmsNorm.cpp_api,
                        client::FusedAddRmsNormArgs{&input, &residual, &weight, eps}, stream,
                        client::RunFusedAddRmsNorm);
}

}  // namespace kiln::ops

extern "C" {

kiln_status kiln_rms_norm(DLTensor* out, const DLTensor* input, const DLTensor* weight, double eps, void* stream) {
  using namespace kiln::client;
  return CallOpC(kRmsNorm, stream, RunRmsNorm, [&](CTensors& t) {
    return RmsNormArgs{t.Tensor(out, "out"), t.Tensor(input, "input"), t.Tensor(weight, "weight"), eps};
  });
}

kiln_status kiln_fused_add_rms_norm(DLTensor* input, DLTensor* residual, const DLTensor* weight, double eps,
                                    void* stream) {
  using namespace kiln::client;
  return CallOpC(kFusedAddRmsNorm, stream, RunFusedAddRmsNorm, [&](CTensors& t) {
    return FusedAddRmsNormArgs{t.Tensor(input, "input"), t.Tensor(residual, "residual"), t.Tensor(weight, "weight"),
                               eps};
  });
}

}  // extern "C"
