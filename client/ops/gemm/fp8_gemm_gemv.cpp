#include "client/ops/gemm/fp8_gemm_gemv.h"

#include <map>
#include <string>
#include <tuple>

#include "client/core/api/auto_number_control.h"
#include "client/core/api/binary_switch.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/gemm/gemm_launch.h"
#include "kiln/gemm/gemm_contract.h"

namespace kiln::client {
namespace {

// One cubin per out_dtype; M, N, K and the k parts are launch arguments.
struct Fp8GemmGemvSpec {
  DType out_dtype = DType::kBFloat16;
  bool operator==(const Fp8GemmGemvSpec&) const = default;
  auto Fields() const { return std::tie(out_dtype); }
  std::map<std::string, std::string> Params() const { return {{gemm::kParamOutDType, DTypeName(out_dtype)}}; }
};

// Entry 0 for M up to kFp8GemvInputsPerPass (one pass of 8 rows of a), entry 1 above (16 rows in
// one pass).
const OpKernels kFp8GemmGemvKernels = {gemm::kFp8GemmGemvOp,
                                       {{{.name = gemm::kFp8GemmGemvEntry,
                                          .min_block = gemm::kGemvThreads,
                                          .uses_items_per_block = true,
                                          .waits_first = true},
                                         {.name = gemm::kFp8GemmGemvWideEntry,
                                          .min_block = gemm::kGemvThreads,
                                          .uses_items_per_block = true,
                                          .waits_first = true}}}};

// On by default: measured on the H200 (bench/results/2026-12-06-h200-fp8-gemv.md).
BinarySwitch& Fp8GemvSwitch() {
  static BinarySwitch s("KILN_FP8_GEMM_GEMV", true,
                        "fp8_gemm runs every M on its tensor-core tile kernel in this process (a diagnostic control; "
                        "by default small M takes the GEMV kernel where it wins, docs/kernels-gemm.md)");
  return s;
}

// A shape the kernel takes (M 0 aside: nothing to launch), else INVALID_ARGUMENT saying why.
Status CheckGemvShape(const Fp8GemmPlan& plan) {
  if (plan.m == 0 || Fp8GemmGemvSuits(plan.m, plan.n)) return OkStatus();
  return InvalidArgument(std::string(plan.api) + ": the fp8 GEMV kernel takes 1 to " +
                         std::to_string(gemm::kFp8GemvMaxRows) + " rows of a and N a multiple of " +
                         std::to_string(gemm::kFp8GemvRowsPerWarp) + ", found M " + std::to_string(plan.m) + " and N " +
                         std::to_string(plan.n));
}

// KILN_FP8_GEMM_GEMV_K_PARTS (a diagnostic control, read once): the k parts, else Fp8GemvKParts.
constinit AutoNumberSetting g_k_parts({"KILN_FP8_GEMM_GEMV_K_PARTS", gemm::kFp8GemvMinKParts, gemm::kFp8GemvMaxKParts,
                                       "auto, 2, 4 or 8", /*powers_of_two=*/true},
                                      "fp8_gemm's GEMV kernel splits each 16-row group's k blocks over {} warps in "
                                      "this process (docs/kernels-gemm.md)");

}  // namespace

int Fp8GemmGemvKParts(int64_t n, int sms) {
  if (const int64_t parts = g_k_parts.Value(); parts > 0) return static_cast<int>(parts);
  return gemm::Fp8GemvKParts(n, sms < 1 ? 1 : sms);
}

void SetFp8GemmGemvKPartsForTesting(int parts) {
  const bool valid = parts == 2 || parts == 4 || parts == 8;
  g_k_parts.SetForTesting(valid ? parts : -1);
}

bool Fp8GemmGemvSuits(int64_t m, int64_t n) {
  return m >= 1 && m <= gemm::kFp8GemvMaxRows && n >= gemm::kFp8GemvRowsPerWarp && n % gemm::kFp8GemvRowsPerWarp == 0;
}

bool Fp8GemmGemvWins(int64_t m, int64_t n, int sms) {
  if (!Fp8GemmGemvSuits(m, n)) return false;
  if (sms < 1) sms = 1;
  const int rows = gemm::Fp8GemvBlockRows(gemm::Fp8GemvKParts(n, sms));
  return (n + rows - 1) / rows <= static_cast<int64_t>(gemm::kFp8GemvBlocksPerSm) * sms;
}

bool Fp8GemmTakesGemv(const Fp8GemmPlan& plan, int sms) {
  return Fp8GemmGemvWins(plan.m, plan.n, sms) && Fp8GemvSwitch().On();
}

void SetFp8GemmGemvForTesting(int on) { Fp8GemvSwitch().SetForTesting(on < 0 ? -1 : on != 0 ? 1 : 0); }

Status LaunchFp8GemmGemv(const Fp8GemmPlan& plan, int sms, void* stream) {
  if (plan.m == 0) return OkStatus();
  KILN_RETURN_IF_ERROR(CheckGemvShape(plan));
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready,
                        PrepareOpLaunch(kFp8GemmGemvKernels, Fp8GemmGemvSpec{plan.out_dtype}, plan.device, plan.api));
  const int index = plan.m <= gemm::kFp8GemvInputsPerPass ? 0 : 1;
  const char* entry = kFp8GemmGemvKernels.entries[index].name;
  const EntryLaunchReady& e = ready.launch->entry(index);
  // The grid comes from the contract's rows per block: a daemon whose kernels tree says
  // otherwise would leave rows unwritten.
  const int widest = gemm::Fp8GemvBlockRows(gemm::kFp8GemvMinKParts);
  if (e.block != static_cast<unsigned>(gemm::kGemvThreads) || e.items_per_block != widest)
    return Status(StatusCode::kFailedPrecondition,
                  std::string(plan.api) + ": the daemon's " + entry + " has a block of " + std::to_string(e.block) +
                      " threads and " + std::to_string(e.items_per_block) + " rows per block; the contract says " +
                      std::to_string(gemm::kGemvThreads) + " and " + std::to_string(widest) +
                      " (kernels tree and client out of step)");
  gemm::Fp8GemmGemvParams params{};
  params.d = plan.d;
  params.a = plan.a;
  params.b = plan.b;
  params.a_scales = plan.a_scales;
  params.b_scales = plan.b_scales;
  params.m = plan.m;
  params.n = plan.n;
  params.k = plan.k;
  params.a_row_stride = plan.a_row_stride;
  params.b_row_stride = plan.b_row_stride;
  params.d_row_stride = plan.d_row_stride;
  params.a_scale_stride = plan.a_scale_stride;
  params.b_scale_stride = plan.b_scale_stride;
  params.k_parts = Fp8GemmGemvKParts(plan.n, sms);
  const int rows = gemm::Fp8GemvBlockRows(params.k_parts);
  const unsigned blocks = static_cast<unsigned>((plan.n + rows - 1) / rows);
  LaunchConfig config = EntryLaunchConfig(e, {blocks}, stream);
  config.programmatic_dependent_launch = GemmProgrammaticLaunch();  // the gemm family's switch, not KILN_PDL
  void* args[] = {&params};
  return LaunchFunction(*ready.driver, e.function, config, args, entry, &ready.launch->library->info);
}

Status Fp8GemmGemv(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& a_scales,
                   const TensorView& b_scales, void* stream) {
  constexpr const char* kApi = "kiln::client::Fp8GemmGemv";
  KILN_ASSIGN_OR_RETURN(const Fp8GemmPlan plan, PlanFp8Gemm(d, a, b, a_scales, b_scales, kApi));
  KILN_RETURN_IF_ERROR(CheckGemvShape(plan));  // before the driver: a refusal needs no GPU
  if (plan.m == 0) return OkStatus();
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status().WithContext(kApi);
  KILN_ASSIGN_OR_RETURN(const GemmDeviceFacts* device, GemmFactsOf(**driver, plan.device));
  return LaunchFp8GemmGemv(plan, device->sms, stream);
}

}  // namespace kiln::client
