// The gemm family's op, gemm (kiln/ops/gemm.h): its entry in the op table, the tactic choice,
// the TMA tensor maps, the launch, and the C++ and C APIs. Validation and the heuristic are
// gemm_plan.h's; the kernel contract kiln/gemm/gemm_contract.h.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "client/core/api/invalid_argument.h"
#include "client/core/capi/c_status.h"
#include "client/core/driver/devices.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/gemm/gemm_gemv.h"
#include "client/ops/gemm/gemm_launch.h"
#include "client/ops/gemm/gemm_ops.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
#include "client/ops/gemm/gemm_tuning.h"
#include "client/ops/op_table.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/ops/gemm.h"

namespace kiln::client {
namespace {

// What selects a kernel: one cubin per (dtype, out_dtype, tactic); M, N, K are launch arguments.
struct GemmSpec {
  DType dtype = DType::kBFloat16;
  DType out_dtype = DType::kBFloat16;
  int32_t tile_m = 0;
  int32_t tile_n = 0;
  int32_t stages = 0;
  int32_t group_m = 0;
  int32_t split_k = 1;
  int32_t multicast = 1;
  bool operator==(const GemmSpec&) const = default;
  auto Fields() const { return std::tie(dtype, out_dtype, tile_m, tile_n, stages, group_m, split_k, multicast); }
  std::map<std::string, std::string> Params() const {
    return {{kParamDType, DTypeName(dtype)},
            {gemm::kParamOutDType, DTypeName(out_dtype)},
            {gemm::kParamTileM, std::to_string(tile_m)},
            {gemm::kParamTileN, std::to_string(tile_n)},
            {gemm::kParamStages, std::to_string(stages)},
            {gemm::kParamGroupM, std::to_string(group_m)},
            {gemm::kParamSplitK, std::to_string(split_k)},
            {gemm::kParamMulticast, std::to_string(multicast)}};
  }
};

const OpKernels kGemmKernels = {gemm::kGemmOp,
                                {{{.name = gemm::kGemmEntry, .min_block = 256, .uses_items_per_block = true}}}};

// The tactic of a call (ChooseTactic: forced, tuned, the heuristic's first unblocked), gemm's
// question: its bucket, ChooseGemmTactic and RankGemmTactics.
StatusOr<ChosenGemmTactic> TacticFor(const GemmPlan& plan, const GemmTacticControls& controls,
                                     const GemmDeviceFacts& device, bool skip_tuned) {
  TacticQuestion q{.op = gemm::kGemmOp,
                   .device_ordinal = plan.device,
                   .device = &device,
                   .api = plan.api,
                   .bucket = GemmTuningBucket(plan.dtype, plan.out_dtype, plan.m, plan.n, plan.k),
                   .heuristic = ChooseGemmTactic(plan.m, plan.n, plan.k, device.sms),
                   .ranked = [&] { return RankGemmTactics(plan.m, plan.n, plan.k, device.sms); }};
  return ChooseTactic(q, controls, skip_tuned);
}

// `forced` null: the tactic controls' or the heuristic's for the shape and the device.
Status LaunchGemm(const GemmPlan& plan, const gemm::GemmTactic* forced, void* stream) {
  if (plan.m == 0) return OkStatus();  // nothing to do, and nothing to launch
  // A bad control fails every call the same way, with or without a GPU.
  const StatusOr<GemmTacticControls>& controls = GemmTacticControlsFromEnvironment();
  if (!controls.ok()) return controls.status().WithContext(plan.api);
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status().WithContext(plan.api);
  KILN_ASSIGN_OR_RETURN(const GemmDeviceFacts* device, GemmFactsOf(**driver, plan.device));
  // Small M: a GEMV kernel where it wins, unless a tactic is forced (gemm_gemv.h).
  if (forced == nullptr && controls->Forced(gemm::kGemmOp) == nullptr && GemmTakesGemv(plan, device->sms))
    return LaunchGemmGemv(plan, stream);
  gemm::GemmTactic tactic{};
  if (forced != nullptr) {
    tactic = *forced;
  } else {
    const TacticCallKey key{gemm::kGemmOp, plan.device, plan.dtype, plan.out_dtype, plan.m, plan.n, plan.k, 0};
    KILN_ASSIGN_OR_RETURN(const ChosenGemmTactic chosen,
                          RememberedTactic(key, [&] { return TacticFor(plan, *controls, *device, false); }));
    tactic = chosen.tactic;
  }
  const GemmSpec spec{plan.dtype,    plan.out_dtype, tactic.tile_m,  tactic.tile_n,
                      tactic.stages, tactic.group_m, tactic.split_k, tactic.multicast};
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready, PrepareOpLaunch(kGemmKernels, spec, plan.device, plan.api));
  KILN_RETURN_IF_ERROR(CheckGemmBlock(ready.launch->entry().block, tactic.tile_m, plan.api, gemm::kGemmOp));

  gemm::GemmParams params{};
  KILN_RETURN_IF_ERROR(EncodeGemmOperands(
      **driver, {plan.dtype, plan.a, plan.m, plan.a_row_stride, plan.b, plan.n, plan.b_row_stride, plan.k}, tactic,
      &params));
  params.d = plan.d;
  params.c = plan.c;
  params.bias = plan.bias;
  params.m = plan.m;
  params.n = plan.n;
  params.k = plan.k;
  params.d_row_stride = plan.d_row_stride;
  params.c_row_stride = plan.c_row_stride;
  params.beta = plan.beta;
  KILN_RETURN_IF_ERROR(EncodeGemmOutput(
      **driver, tactic, DenseGemmOutput(plan, /*with_c=*/plan.c != nullptr, /*fp8_inputs=*/false), &params));

  KILN_ASSIGN_OR_RETURN(const long long blocks,
                        PersistentGemmBlocks(**driver, ready, tactic, plan.m, plan.n, device->sms, plan.api));
  return LaunchGemmKernel(**driver, ready, gemm::kGemmEntry, blocks, params, stream);
}

struct GemmArgs {
  const TensorView* d = nullptr;
  const TensorView* a = nullptr;
  const TensorView* b = nullptr;
  const TensorView* bias = nullptr;
  const TensorView* c = nullptr;
  double beta = 1.0;
  template <typename Self, typename V>
  static void Visit(Self& x, V& v) {
    v.Out("d", x.d).In("a", x.a).In("b", x.b).OptionalIn("bias", x.bias).OptionalIn("c", x.c).Param("beta", x.beta);
  }
};

Status RunGemm(const GemmArgs& x, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const GemmPlan plan, PlanGemm(*x.d, *x.a, *x.b, x.bias, x.c, x.beta, api));
  return LaunchGemm(plan, nullptr, stream);
}

const OpDescriptor kGemm = {.name = "gemm",
                            .op = gemm::kGemmOp,
                            .family = "gemm",
                            .cpp_api = "kiln::ops::gemm",
                            .c_api = "kiln_gemm",
                            .invoke = InvokeByVisit<GemmArgs, RunGemm>};
KILN_REGISTER_OP(kGemm);

}  // namespace

StatusOr<ChosenGemmTactic> GemmTacticOfCall(const GemmPlan& plan, bool skip_tuned) {
  const StatusOr<GemmTacticControls>& controls = GemmTacticControlsFromEnvironment();
  if (!controls.ok()) return controls.status().WithContext(plan.api);
  KILN_ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Get());
  KILN_ASSIGN_OR_RETURN(const GemmDeviceFacts* device, GemmFactsOf(*driver, plan.device));
  return TacticFor(plan, *controls, *device, skip_tuned);
}

Status LaunchGemmPlan(const GemmPlan& plan, const gemm::GemmTactic& tactic, void* stream) {
  if (!gemm::GemmTacticFits(tactic))
    return InvalidArgument(std::string(plan.api) + ": tactic " + GemmTacticText(tactic) +
                           " is not in the gemm tactic space");
  return LaunchGemm(plan, &tactic, stream);
}

}  // namespace kiln::client

namespace kiln::ops {

Status gemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView* bias, const TensorView* c,
            double beta, void* stream) {
  return client::CallOp(client::kGemm, client::kGemm.cpp_api, client::GemmArgs{&d, &a, &b, bias, c, beta}, stream,
                        client::RunGemm);
}

}  // namespace kiln::ops

extern "C" {

kiln_status kiln_gemm(DLTensor* d, const DLTensor* a, const DLTensor* b, const DLTensor* bias, const DLTensor* c,
                      double beta, void* stream) {
  using namespace kiln::client;
  return CallOpC(kGemm, stream, RunGemm, [&](CTensors& t) {
    return GemmArgs{t.Tensor(d, "d"),         t.Tensor(a, "a"),   t.Tensor(b, "b"),
                    t.Optional(bias, "bias"), t.Optional(c, "c"), beta};
  });
}

}  // extern "C"
