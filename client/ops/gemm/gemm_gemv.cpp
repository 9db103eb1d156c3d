#include "client/ops/gemm/gemm_gemv.h"

#include <map>
#include <string>
#include <tuple>

#include "client/core/api/binary_switch.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/gemm/gemm_launch.h"
#include "kiln/gemm/gemm_contract.h"

namespace kiln::client {
namespace {

// One cubin per (dtype, out_dtype); M, N and K are launch arguments.
struct GemmGemvSpec {
  DType dtype = DType::kBFloat16;
  DType out_dtype = DType::kBFloat16;
  bool operator==(const GemmGemvSpec&) const = default;
  auto Fields() const { return std::tie(dtype, out_dtype); }
  std::map<std::string, std::string> Params() const {
    return {{kParamDType, DTypeName(dtype)}, {gemm::kParamOutDType, DTypeName(out_dtype)}};
  }
};

// Entry 0 for M <= kGemvScalarMaxRows, entry 1 up to kGemvMaxRows, entry 2 (the wide mma
// kernel) up to kGemvWideMaxRows (kiln/gemm/gemm_contract.h).
const OpKernels kGemmGemvKernels = {gemm::kGemmGemvOp,
                                    {{{.name = gemm::kGemmGemvEntry,
                                       .min_block = gemm::kGemvThreads,
                                       .uses_items_per_block = true,
                                       .waits_first = true},
                                      {.name = gemm::kGemmGemvMmaEntry,
                                       .min_block = gemm::kGemvThreads,
                                       .uses_items_per_block = true,
                                       .waits_first = true},
                                      {.name = gemm::kGemmGemvMmaWideEntry,
                                       .min_block = gemm::kGemvThreads,
                                       .uses_items_per_block = true,
                                       .waits_first = true}}}};

int GemvEntryFor(int64_t m) { return m <= gemm::kGemvScalarMaxRows ? 0 : m <= gemm::kGemvMaxRows ? 1 : 2; }

// On by default: measured on the H200 (bench/results/2026-12-05-gemm-gemv-h200.md).
BinarySwitch& GemvSwitch() {
  static BinarySwitch s("KILN_GEMM_GEMV", true,
                        "gemm runs every M on its tensor-core tile kernel in this process (a diagnostic control; by "
                        "default small M takes a GEMV kernel where it wins, docs/kernels-gemm.md)");
  return s;
}

// Off by default: measured on an H100 against the tile kernel, 3-4 % faster at qkv and o at M 24,
// 34 % slower at the down projection (bench/results/2026-12-05-h100-fold-wide-memo.md).
BinarySwitch& GemvWideSwitch() {
  static BinarySwitch s("KILN_GEMM_GEMV_WIDE", false,
                        "gemm at M 17 to 32 takes the wide GEMV kernel where N's blocks fit on the SMs in this process "
                        "(a diagnostic control; by default those M run the tile kernel, docs/kernels-gemm.md)");
  return s;
}

}  // namespace

bool GemmGemvSuits(int64_t m, int64_t n, int sms, int64_t max_rows) {
  if (m < 1 || m > max_rows || m > gemm::kGemvWideMaxRows) return false;
  if (m <= gemm::kGemvScalarMaxRows) return true;
  const int64_t blocks = (n + gemm::kGemvColumnsPerBlock - 1) / gemm::kGemvColumnsPerBlock;
  return blocks <= static_cast<int64_t>(gemm::kGemvBlocksPerSm) * sms;
}

bool GemmTakesGemv(const GemmPlan& plan, int sms) {
  const int64_t max_rows = GemvWideSwitch().On() ? gemm::kGemvWideMaxRows : gemm::kGemvMaxRows;
  return GemmGemvSuits(plan.m, plan.n, sms, max_rows) && GemvSwitch().On();
}

void SetGemmGemvForTesting(int on) { GemvSwitch().SetForTesting(on < 0 ? -1 : on != 0 ? 1 : 0); }

void SetGemmGemvWideForTesting(int on) { GemvWideSwitch().SetForTesting(on < 0 ? -1 : on != 0 ? 1 : 0); }

Status LaunchGemmGemv(const GemmPlan& plan, void* stream) {
  if (plan.m == 0) return OkStatus();
  if (plan.m > gemm::kGemvWideMaxRows)
    return InvalidArgument(std::string(plan.api) + ": a: the GEMV kernels take at most " +
                           std::to_string(gemm::kGemvWideMaxRows) + " rows, found " + std::to_string(plan.m));
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready,
                        PrepareOpLaunch(kGemmGemvKernels, GemmGemvSpec{plan.dtype, plan.out_dtype}, plan.device,
                                        plan.api));
  const int index = GemvEntryFor(plan.m);
  const char* entry = kGemmGemvKernels.entries[index].name;
  const EntryLaunchReady& e = ready.launch->entry(index);
  // The grid comes from the contract's columns per block: a daemon whose kernels tree says
  // otherwise would leave columns unwritten.
  if (e.block != static_cast<unsigned>(gemm::kGemvThreads) || e.items_per_block != gemm::kGemvColumnsPerBlock)
    return Status(StatusCode::kFailedPrecondition,
                  std::string(plan.api) + ": the daemon's " + entry + " has a block of " + std::to_string(e.block) +
                      " threads and " + std::to_string(e.items_per_block) + " columns per block; the contract says " +
                      std::to_string(gemm::kGemvThreads) + " and " + std::to_string(gemm::kGemvColumnsPerBlock) +
                      " (kernels tree and client out of step)");
  gemm::GemmGemvParams params{};
  params.d = plan.d;
  params.a = plan.a;
  params.b = plan.b;
  params.c = plan.c;
  params.bias = plan.bias;
  params.m = plan.m;
  params.n = plan.n;
  params.k = plan.k;
  params.a_row_stride = plan.a_row_stride;
  params.b_row_stride = plan.b_row_stride;
  params.d_row_stride = plan.d_row_stride;
  params.c_row_stride = plan.c_row_stride;
  params.beta = plan.beta;
  const unsigned blocks = static_cast<unsigned>((plan.n + gemm::kGemvColumnsPerBlock - 1) / gemm::kGemvColumnsPerBlock);
  LaunchConfig config = EntryLaunchConfig(e, {blocks}, stream);
  config.programmatic_dependent_launch = GemmProgrammaticLaunch();  // the gemm family's switch, not KILN_PDL
  void* args[] = {&params};
  return LaunchFunction(*ready.driver, e.function, config, args, entry, &ready.launch->library->info);
}

Status GemmGemv(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView* bias,
                const TensorView* c, double beta, void* stream) {
  constexpr const char* kApi = "kiln::client::GemmGemv";
  KILN_ASSIGN_OR_RETURN(const GemmPlan plan, PlanGemm(d, a, b, bias, c, beta, kApi));
  return LaunchGemmGemv(plan, stream);
}

}  // namespace kiln::client
