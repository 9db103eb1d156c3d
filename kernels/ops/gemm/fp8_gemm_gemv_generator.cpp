// The generator of fp8_gemm's small-M kernel (op fp8_gemm_gemv, the gemm family; internal:
// kiln::ops::fp8_gemm launches it for small M, client/ops/gemm/fp8_gemm_gemv.h): one compilation
// unit (kernels/src/gemm/fp8_gemv.cu) with two entries (8 rows of a a pass; 16 in one pass for M
// 9-16), specialized on the output type,
// fp8_gemm_gemv_e4m3_obf16; M, N, K and the k parts are launch arguments, and there is no
// tactic. Contract: kiln/gemm/gemm_contract.h (Fp8GemmGemvParams), kiln/gemm/fp8_gemv.cuh;
// docs/kernels-gemm.md, "Small M on fp8: the GEMV kernel".
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/gemm/gemm_tactic_params.h"
#include "kernels/ops/generator_support.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr const char* kUnitPath = "src/gemm/fp8_gemv.cu";

// Host memory of one compile: one short loop body per specialization, the size of gemm_gemv's
// unit (whose figure this is).
constexpr int64_t kCompileMemoryMb = 128;

class Fp8GemmGemvGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return gemm::kFp8GemmGemvOp; }
  std::string_view family() const override { return "gemm"; }
  std::string_view description() const override {
    return "fp8_gemm for M <= 16 rows: D[M, N] = sum over 128-wide K blocks of a_scales . b_scales . (A[M, K] . "
           "B[N, K]^T) on e4m3 A and B as a GEMV that streams each row of B once in 16-byte loads: a warp per 16 rows "
           "of B, the K blocks split over 2, 4 or 8 warps, mma.sync m16n8k32 on A's rows 8 a pass, each K block "
           "promoted into fp32 with both scales (fp8_gemm's interval); the warps' sums in a fixed order "
           "(deterministic), one rounding to D's type; kiln::ops::fp8_gemm launches it for small M";
  }

  std::vector<ParamInfo> params() const override { return {Fp8GemmOutDTypeParam()}; }

  // sm_90a, as fp8_gemm (its tile kernel needs wgmma and TMA): a call runs on the same devices
  // whatever its M. The kernel waits with griddepcontrol, which sm_90 brought.
  std::vector<ArchFamily> arch_families() const override { return {FamilyArchSpecific(90)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& out = *Fp8GemmTypesOf(values).out;
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", kE4m3Info.name, "_o", out.name);
    spec.params = {{gemm::kParamOutDType, out.name}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/gemm/fp8_gemm_gemv_generator.cpp",
                                        {{"KILN_GEMM_TOUT", out.cuda_type}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {gemm::kFp8GemmGemvEntry, gemm::kFp8GemmGemvWideEntry};
    // items_per_block: rows of B per block at the fewest k parts; the client sizes the grid from
    // the parts it passes (Fp8GemvBlockRows).
    spec.launch = {{.entry = gemm::kFp8GemmGemvEntry,
                    .block = gemm::kGemvThreads,
                    .items_per_block = gemm::Fp8GemvBlockRows(gemm::kFp8GemvMinKParts)},
                   {.entry = gemm::kFp8GemmGemvWideEntry,
                    .block = gemm::kGemvThreads,
                    .items_per_block = gemm::Fp8GemvBlockRows(gemm::kFp8GemvMinKParts)}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(Fp8GemmGemvGenerator);

}  // namespace
}  // namespace kiln::kernels
