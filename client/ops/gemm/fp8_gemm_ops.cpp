// The gemm family's block-scaled fp8 op, fp8_gemm (kiln/ops/gemm.h): its entry in the op table,
// the tactic, the tensor maps, the launch, and the C++ and C APIs. Validation and the heuristic
// are fp8_gemm_plan.h's; the kernel contract kiln/gemm/gemm_contract.h (the gemm kernel with
// e4m3 inputs: kiln/gemm/gemm_sm90.cuh; at small M the GEMV kernel: fp8_gemm_gemv.h).
#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "client/core/api/invalid_argument.h"
#include "client/core/capi/c_status.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/gemm/fp8_gemm_gemv.h"
#include "client/ops/gemm/fp8_gemm_ops.h"
#include "client/ops/gemm/fp8_gemm_plan.h"
#include "client/ops/gemm/gemm_launch.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
#include "client/ops/gemm/gemm_tuning.h"
#include "client/ops/op_table.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/ops/gemm.h"

namespace kiln::client {
namespace {

// What selects a kernel: one cubin per (out_dtype, tactic); M, N, K are launch arguments.
struct Fp8GemmSpec {
  DType out_dtype = DType::kBFloat16;
  int32_t tile_m = 0;
  int32_t tile_n = 0;
  int32_t stages = 0;
  int32_t group_m = 0;
  int32_t split_k = 1;
  int32_t multicast = 1;
  bool operator==(const Fp8GemmSpec&) const = default;
  auto Fields() const { return std::tie(out_dtype, tile_m, tile_n, stages, group_m, split_k, multicast); }
  std::map<std::string, std::string> Params() const {
    return {{gemm::kParamOutDType, DTypeName(out_dtype)},      {gemm::kParamTileM, std::to_string(tile_m)},
            {gemm::kParamTileN, std::to_string(tile_n)},       {gemm::kParamStages, std::to_string(stages)},
            {gemm::kParamGroupM, std::to_string(group_m)},     {gemm::kParamSplitK, std::to_string(split_k)},
            {gemm::kParamMulticast, std::to_string(multicast)}};
  }
};

const OpKernels kFp8GemmKernels = {gemm::kFp8GemmOp,
                                   {{{.name = gemm::kFp8GemmEntry, .min_block = 256, .uses_items_per_block = true}}}};

// The tactic of a call (ChooseTactic: forced, tuned, the heuristic's first unblocked).
StatusOr<ChosenGemmTactic> Fp8TacticFor(const Fp8GemmPlan& plan, const GemmDeviceFacts& device, bool skip_tuned) {
  const StatusOr<GemmTacticControls>& controls = GemmTacticControlsFromEnvironment();
  if (!controls.ok()) return controls.status().WithContext(plan.api);
  TacticQuestion q{.op = gemm::kFp8GemmOp,
                   .device_ordinal = plan.device,
                   .device = &device,
                   .api = plan.api,
                   .bucket = GemmTuningBucket(DType::kFloat8E4M3, plan.out_dtype, plan.m, plan.n, plan.k),
                   .heuristic = ChooseFp8GemmTactic(plan.m, plan.n, plan.k, device.sms)};
  return ChooseTactic(q, *controls, skip_tuned);
}

// `forced` null: the tactic of the call (Fp8TacticFor, remembered per thread).
Status LaunchFp8Gemm(const Fp8GemmPlan& plan, const gemm::GemmTactic* forced, void* stream) {
  if (plan.m == 0) return OkStatus();  // nothing to do, and nothing to launch
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status().WithContext(plan.api);
  KILN_ASSIGN_OR_RETURN(const GemmDeviceFacts* device, GemmFactsOf(**driver, plan.device));
  // Small M: the GEMV kernel where it wins, unless a tactic is forced (fp8_gemm_gemv.h).
  if (forced == nullptr && Fp8GemmTakesGemv(plan, device->sms)) {
    const StatusOr<GemmTacticControls>& controls = GemmTacticControlsFromEnvironment();
    if (!controls.ok()) return controls.status().WithContext(plan.api);
    if (controls->Forced(gemm::kFp8GemmOp) == nullptr) return LaunchFp8GemmGemv(plan, device->sms, stream);
  }
  gemm::GemmTactic tactic{};
  if (forced != nullptr) {
    tactic = *forced;
  } else {
    const TacticCallKey key{
        gemm::kFp8GemmOp, plan.device, DType::kFloat8E4M3, plan.out_dtype, plan.m, plan.n, plan.k, 0};
    KILN_ASSIGN_OR_RETURN(const ChosenGemmTactic chosen,
                          RememberedTactic(key, [&] { return Fp8TacticFor(plan, *device, false); }));
    tactic = chosen.tactic;
  }
  const Fp8GemmSpec spec{plan.out_dtype, tactic.tile_m,  tactic.tile_n,   tactic.stages,
                         tactic.group_m, tactic.split_k, tactic.multicast};
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready, PrepareOpLaunch(kFp8GemmKernels, spec, plan.device, plan.api));
  KILN_RETURN_IF_ERROR(CheckGemmBlock(ready.launch->entry().block, tactic.tile_m, plan.api, gemm::kFp8GemmOp));

  gemm::GemmParams params{};
  KILN_RETURN_IF_ERROR(EncodeGemmOperands(
      **driver, {DType::kFloat8E4M3, plan.a, plan.m, plan.a_row_stride, plan.b, plan.n, plan.b_row_stride, plan.k},
      tactic, &params));
  params.d = plan.d;
  params.m = plan.m;
  params.n = plan.n;
  params.k = plan.k;
  params.d_row_stride = plan.d_row_stride;
  params.a_scales = plan.a_scales;
  params.b_scales = plan.b_scales;
  params.a_scale_stride = plan.a_scale_stride;
  params.b_scale_stride = plan.b_scale_stride;
  // The TMA-store epilogue where the tactic has the staging and D suits it (fp8_gemm adds no c).
  KILN_RETURN_IF_ERROR(
      EncodeGemmOutput(**driver, tactic, DenseGemmOutput(plan, /*with_c=*/false, /*fp8_inputs=*/true), &params));

  KILN_ASSIGN_OR_RETURN(const long long blocks,
                        PersistentGemmBlocks(**driver, ready, tactic, plan.m, plan.n, device->sms, plan.api));
  return LaunchGemmKernel(**driver, ready, gemm::kFp8GemmEntry, blocks, params, stream);
}

struct Fp8GemmArgs {
  const TensorView* d = nullptr;
  const TensorView* a = nullptr;
  const TensorView* b = nullptr;
  const TensorView* a_scales = nullptr;
  const TensorView* b_scales = nullptr;
  template <typename Self, typename V>
  static void Visit(Self& x, V& v) {
    v.Out("d", x.d).In("a", x.a).In("b", x.b).In("a_scales", x.a_scales).In("b_scales", x.b_scales);
  }
};

Status RunFp8Gemm(const Fp8GemmArgs& x, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const Fp8GemmPlan plan, PlanFp8Gemm(*x.d, *x.a, *x.b, *x.a_scales, *x.b_scales, api));
  return LaunchFp8Gemm(plan, nullptr, stream);
}

const OpDescriptor kFp8Gemm = {.name = "fp8_gemm",
                               .op = gemm::kFp8GemmOp,
                               .family = "gemm",
                               .cpp_api = "kiln::ops::fp8_gemm",
                               .c_api = "kiln_fp8_gemm",
                               .invoke = InvokeByVisit<Fp8GemmArgs, RunFp8Gemm>};
KILN_REGISTER_OP(kFp8Gemm);

}  // namespace

StatusOr<ChosenGemmTactic> Fp8GemmTacticOfCall(const Fp8GemmPlan& plan, bool skip_tuned) {
  KILN_ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Get());
  KILN_ASSIGN_OR_RETURN(const GemmDeviceFacts* device, GemmFactsOf(*driver, plan.device));
  return Fp8TacticFor(plan, *device, skip_tuned);
}

Status LaunchFp8GemmPlan(const Fp8GemmPlan& plan, const gemm::GemmTactic& tactic, void* stream) {
  if (!gemm::Fp8GemmTacticFits(tactic))
    return InvalidArgument(std::string(plan.api) + ": tactic " + GemmTacticText(tactic, gemm::kFp8GemmOp) +
                           " is not in the fp8_gemm tactic space (gemm's)");
  return LaunchFp8Gemm(plan, &tactic, stream);
}

}  // namespace kiln::client

namespace kiln::ops {

Status fp8_gemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& a_scales,
                const TensorView& b_scales, void* stream) {
  return client::CallOp(client::kFp8Gemm, client::kFp8Gemm.cpp_api,
                        client::Fp8GemmArgs{&d, &a, &b, &a_scales, &b_scales}, stream, client::RunFp8Gemm);
}

}  // namespace kiln::ops

extern "C" {

kiln_status kiln_fp8_gemm(DLTensor* d, const DLTensor* a, const DLTensor* b, const DLTensor* a_scales,
                          const DLTensor* b_scales, void* stream) {
  using namespace kiln::client;
  return CallOpC(kFp8Gemm, stream, RunFp8Gemm, [&](CTensors& t) {
    return Fp8GemmArgs{t.Tensor(d, "d"), t.Tensor(a, "a"), t.Tensor(b, "b"), t.Tensor(a_scales, "a_scales"),
                       t.Tensor(b_scales, "b_scales")};
  });
}

}  // extern "C"
