// The gemm family's generator (op "gemm"): one compilation unit (kernels/src/gemm/gemm.cu)
// specialized on the input and output types and the tactic (kiln::gemm::GemmTactic: tile,
// stages, raster group, split-K, multicast), which the URI names: gemm_bf16_obf16_t128x256x64s4g8,
// with a split gemm_bf16_obf16_t64x256x64s4g8k8, with multicast gemm_bf16_obf16_t128x256x64s4g8m2. M, N and K are
// launch arguments. Contract: kiln/gemm/gemm_contract.h; docs/kernels-gemm.md.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/gemm/gemm_tactic_params.h"
#include "kernels/ops/generator_support.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr const char* kUnitPath = "src/gemm/gemm.cu";

class GemmGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return gemm::kGemmOp; }
  std::string_view family() const override { return "gemm"; }
  std::string_view description() const override {
    return "D[M, N] = A[M, K] . B[N, K]^T (+ bias[N]) (+ beta * C[M, N]) on Hopper tensor cores (TMA, mbarrier "
           "pipeline, wgmma, warp-specialized persistent blocks), fp32 accumulation; A and B K-major";
  }

  std::vector<ParamInfo> params() const override {
    std::vector<ParamInfo> all = GemmDTypeParams("element type of A, B and bias",
                                                 "element type of D and C. auto: dtype");
    for (ParamInfo& p : GemmTacticParams()) all.push_back(std::move(p));
    all.push_back(GemmSplitKParam());
    all.push_back(GemmMulticastParam());
    return all;
  }

  // TMA, mbarrier transactions, wgmma and setmaxnreg exist only in sm_90a.
  std::vector<ArchFamily> arch_families() const override { return {FamilyArchSpecific(90)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const GemmTypes types = GemmTypesOf(values);
    const DTypeInfo& in = *types.in;
    const DTypeInfo& out = *types.out;
    KILN_ABSL_ASSIGN_OR_RETURN(const gemm::GemmTactic tactic,
                               GemmTacticOf(op, values, values.Int(gemm::kParamSplitK), /*grouped=*/false,
                                            values.Int(gemm::kParamMulticast)));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", in.name, "_o", out.name, "_", GemmTacticUri(tactic));
    spec.params = {{kParamDType, in.name}, {gemm::kParamOutDType, out.name}};
    for (auto& [key, value] : GemmTacticSpecParams(tactic)) spec.params[key] = value;
    spec.params[gemm::kParamSplitK] = std::to_string(tactic.split_k);
    spec.params[gemm::kParamMulticast] = std::to_string(tactic.multicast);
    std::vector<std::pair<std::string, std::string>> defines = {{"KILN_GEMM_TIN", in.cuda_type},
                                                                {"KILN_GEMM_TOUT", out.cuda_type}};
    for (auto& d : GemmTacticDefines(tactic)) defines.push_back(d);
    defines.push_back({"KILN_GEMM_SPLIT_K", std::to_string(tactic.split_k)});
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/gemm/gemm_generator.cpp", defines));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {gemm::kGemmEntry};
    spec.launch = {{.entry = gemm::kGemmEntry,
                    .block = gemm::GemmThreads(tactic.tile_m),
                    .dynamic_smem = gemm::GemmSmemBytes(tactic.tile_m, tactic.tile_n, tactic.stages, tactic.split_k,
                                                        /*grouped=*/false, tactic.multicast),
                    .items_per_block = tactic.tile_m * tactic.tile_n}};
    spec.compile_memory_mb = kGemmCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(GemmGenerator);

}  // namespace
}  // namespace kiln::kernels
