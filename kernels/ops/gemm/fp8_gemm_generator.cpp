// The fp8_gemm generator (family gemm): kernels/src/gemm/fp8_gemm.cu specialized on the output
// type and the tactic (gemm's tiles, stages, splits and multicast), which the URI names:
// fp8_gemm_e4m3_obf16_t128x256x128s4g8 (K 128 a stage; t64x256x128s4g8k4 split 4 ways; ...g8m2 a multicast
// pair). M, N and K are launch arguments. Contract: kiln/gemm/gemm_contract.h; docs/kernels-gemm.md.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/gemm/gemm_tactic_params.h"
#include "kernels/ops/generator_support.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr const char* kUnitPath = "src/gemm/fp8_gemm.cu";

class Fp8GemmGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return gemm::kFp8GemmOp; }
  std::string_view family() const override { return "gemm"; }
  std::string_view description() const override {
    return "D[M, N] = A[M, K] . B[N, K]^T with e4m3 A and B and fp32 block scales (A per 1 x 128 of K, B per "
           "128 x 128), the fp8 tensor-core products promoted into fp32 accumulators once per 128 of K; Hopper "
           "pipeline as gemm's";
  }

  std::vector<ParamInfo> params() const override {
    std::vector<ParamInfo> all = {Fp8GemmOutDTypeParam()};
    for (ParamInfo& p : GemmTacticParams()) all.push_back(std::move(p));
    all.push_back(GemmSplitKParam());
    all.push_back(GemmMulticastParam());
    return all;
  }

  std::vector<ArchFamily> arch_families() const override { return {FamilyArchSpecific(90)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& out = *Fp8GemmTypesOf(values).out;
    KILN_ABSL_ASSIGN_OR_RETURN(const gemm::GemmTactic tactic,
                               GemmTacticOf(op, values, values.Int(gemm::kParamSplitK), /*grouped=*/false,
                                            values.Int(gemm::kParamMulticast)));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", kE4m3Info.name, "_o", out.name, "_", GemmTacticUri(tactic, /*fp8=*/true));
    spec.params = {{gemm::kParamOutDType, out.name}};
    for (auto& [key, value] : GemmTacticSpecParams(tactic)) spec.params[key] = value;
    spec.params[gemm::kParamSplitK] = std::to_string(tactic.split_k);
    spec.params[gemm::kParamMulticast] = std::to_string(tactic.multicast);
    std::vector<std::pair<std::string, std::string>> defines = {{"KILN_GEMM_TOUT", out.cuda_type}};
    for (auto& d : GemmTacticDefines(tactic)) defines.push_back(d);
    defines.push_back({"KILN_GEMM_SPLIT_K", std::to_string(tactic.split_k)});
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/gemm/fp8_gemm_generator.cpp", defines));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {gemm::kFp8GemmEntry};
    spec.launch = {{.entry = gemm::kFp8GemmEntry,
                    .block = gemm::GemmThreads(tactic.tile_m),
                    .dynamic_smem = gemm::GemmSmemBytes(tactic.tile_m, tactic.tile_n, tactic.stages, tactic.split_k,
                                                        /*grouped=*/false, tactic.multicast),
                    .items_per_block = tactic.tile_m * tactic.tile_n}};
    spec.compile_memory_mb = kGemmCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(Fp8GemmGenerator);

}  // namespace
}  // namespace kiln::kernels
