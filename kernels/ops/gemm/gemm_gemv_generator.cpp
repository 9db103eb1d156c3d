// The generator of gemm's small-M kernels (op gemm_gemv, the gemm family; internal:
// kiln::ops::gemm launches them for small M where they win, client/ops/gemm/gemm_gemv.h): one
// compilation unit (kernels/src/gemm/gemv.cu) with three entries (fp32 FMAs at M 1, mma.sync
// above, its four-tile form for M 17 to 32), specialized on the input and output types, gemm_gemv_bf16_obf16; M, N and
// K are launch arguments, and there is no tactic. Contract: kiln/gemm/gemm_contract.h (GemmGemvParams),
// kiln/gemm/gemv.cuh; docs/kernels-gemm.md, "Small M: the GEMV kernels".
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/gemm/gemm_tactic_params.h"
#include "kernels/ops/generator_support.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr const char* kUnitPath = "src/gemm/gemv.cu";

// Host memory of one compile: two short loop bodies (four row counts, two n-tile counts) per
// specialization, the size of fused_moe's GEMV unit; the norm family's 128 MB (measured there)
// covers it.
constexpr int64_t kCompileMemoryMb = 128;

class GemmGemvGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return gemm::kGemmGemvOp; }
  std::string_view family() const override { return "gemm"; }
  std::string_view description() const override {
    return "gemm for M <= 32 rows: D[M, N] = A[M, K] . B[N, K]^T (+ bias[N]) (+ beta * C[M, N]) as a GEMV that "
           "streams each row of B once in 16-byte loads, a block per 16 columns of D: at M 1 a warp per two rows "
           "of B with fp32 FMAs, above that mma.sync over the block's 16 rows of B, K split over the warps (a wide "
           "form with four n-tiles for M 17-32); fp32 "
           "sums in a fixed order (deterministic), one rounding to D's type; kiln::ops::gemm launches it for small M "
           "where it wins";
  }

  std::vector<ParamInfo> params() const override {
    return GemmDTypeParams("element type of A, B and bias", "element type of D and C. auto: dtype");
  }

  // sm_90a, as the rest of the gemm op (its tile kernel needs wgmma and TMA): a gemm call runs on
  // the same devices whatever its M. The kernel waits with griddepcontrol, which sm_90 brought.
  std::vector<ArchFamily> arch_families() const override { return {FamilyArchSpecific(90)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const GemmTypes types = GemmTypesOf(values);
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", types.in->name, "_o", types.out->name);
    spec.params = {{kParamDType, types.in->name}, {gemm::kParamOutDType, types.out->name}};
    spec.headers.push_back(
        ConfigHeader(op, spec.uri, "kernels/ops/gemm/gemm_gemv_generator.cpp",
                     {{"KILN_GEMM_TIN", types.in->cuda_type}, {"KILN_GEMM_TOUT", types.out->cuda_type}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {gemm::kGemmGemvEntry, gemm::kGemmGemvMmaEntry, gemm::kGemmGemvMmaWideEntry};
    // items_per_block: columns of D per block (grid.x = ceil(N / items_per_block)), every entry.
    spec.launch = {
        {.entry = gemm::kGemmGemvEntry, .block = gemm::kGemvThreads, .items_per_block = gemm::kGemvColumnsPerBlock},
        {.entry = gemm::kGemmGemvMmaEntry, .block = gemm::kGemvThreads, .items_per_block = gemm::kGemvColumnsPerBlock},
        {.entry = gemm::kGemmGemvMmaWideEntry,
         .block = gemm::kGemvThreads,
         .items_per_block = gemm::kGemvColumnsPerBlock}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(GemmGemvGenerator);

}  // namespace
}  // namespace kiln::kernels
