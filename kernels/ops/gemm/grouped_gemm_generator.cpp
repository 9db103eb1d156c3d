// The grouped_gemm and grouped_gemm_masked generators (family gemm) and their block-scaled fp8
// forms grouped_fp8_gemm and grouped_fp8_gemm_masked: kernels/src/gemm/grouped_gemm.cu
// specialized on the input and output types, the layout of the groups' rows (contiguous,
// m_indptr; masked: [E, M_max] with a count per group) and the tactic, which the URI names:
// grouped_gemm_bf16_obf16_t128x256x64s4g8, grouped_fp8_gemm_e4m3_obf16_t128x256x128s4g8 (fp8:
// K 128 a stage). The contiguous ops also take an epilogue, silu_and_mul (fused_moe's gate-and-up
// GEMM: D = silu(gate) * up of each group's [gate; up] rows of B), which the URI ends with:
// grouped_gemm_bf16_obf16_t128x256x64s4g8_silu_and_mul; on fp8 inputs only into e4m3 codes with a
// scale per row and 128 columns (out_dtype fp8_e4m3, tile_n 256: fused_moe_fp8's),
// grouped_fp8_gemm_e4m3_ofp8_e4m3_t128x256x128s4g8_silu_and_mul. The contiguous ops also take
// a_gather (1: A's rows gathered through a row table, GemmParams::a_rows; fused_moe's and
// fused_moe_fp8's gate-and-up GEMMs read x by moe_permute's row_to_slot), which the URI ends with:
// ..._silu_and_mul_ga. The groups, their rows, N and K are launch arguments. Contract: kiln/gemm/gemm_contract.h;
// docs/kernels-gemm.md.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/gemm/gemm_tactic_params.h"
#include "kernels/ops/generator_support.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr const char* kUnitPath = "src/gemm/grouped_gemm.cu";

template <int kLayout, bool kFp8>
class GroupedGemmGenerator : public OpGenerator {
 public:
  std::string_view name() const override {
    if (kFp8) return kLayout == gemm::kMaskedLayout ? gemm::kGroupedFp8GemmMaskedOp : gemm::kGroupedFp8GemmOp;
    return kLayout == gemm::kMaskedLayout ? gemm::kGroupedGemmMaskedOp : gemm::kGroupedGemmOp;
  }
  std::string_view family() const override { return "gemm"; }
  std::string_view description() const override {
    if (kFp8)
      return kLayout == gemm::kMaskedLayout
                 ? "grouped_gemm_masked on e4m3 A and B with fp32 block scales (A per 1 x 128 of K, B per group "
                   "and 128 x 128), each 128-wide K block's sum promoted into fp32 times its scales"
                 : "grouped_gemm (contiguous rows, m_indptr) on e4m3 A and B with fp32 block scales (A per 1 x 128 "
                   "of K, B per group and 128 x 128), each 128-wide K block's sum promoted into fp32";
    return kLayout == gemm::kMaskedLayout
               ? "E independent products sharing N and K (mixture-of-experts decode): D[e] = A[e] . B[e]^T with A "
                 "[E, M_max, K], D [E, M_max, N], B [E, N, K], and only the first masked_m[e] rows of group e (a "
                 "device tensor: graph-capturable); the gemm kernel's Hopper pipeline, fp32 accumulation"
               : "E independent products sharing N and K (mixture-of-experts layers): the rows of A and D of all "
                 "groups concatenated, group e rows m_indptr[e] .. m_indptr[e + 1] - 1 (a device tensor), "
                 "D_e = A_e . B[e]^T, B [E, N, K]; the gemm kernel's Hopper pipeline, fp32 accumulation";
  }

  std::vector<ParamInfo> params() const override {
    std::vector<ParamInfo> all = kFp8 ? std::vector<ParamInfo>{HasEpilogueParam() ? GroupedFp8GemmOutDTypeParam()
                                                                                  : Fp8GemmOutDTypeParam()}
                                      : GemmDTypeParams("element type of A and B", "element type of D. auto: dtype");
    for (ParamInfo& p : GemmTacticParams()) all.push_back(std::move(p));
    if (HasEpilogueParam())
      all.push_back({.name = gemm::kParamEpilogue,
                     .help = kFp8 ? "what D is: none, the product; silu_and_mul, silu(gate) * up where each group's N "
                                    "rows of B are [gate; up] and D has N / 2 columns, as e4m3 codes with a scale per "
                                    "row and 128 columns (out_dtype fp8_e4m3, tile_n 256; fused_moe_fp8)"
                                  : "what D is: none, the product; silu_and_mul, silu(gate) * up where each group's N "
                                    "rows of B are [gate; up] and D has N / 2 columns (fused_moe)",
                     .choices = {gemm::kGemmEpilogueNames[gemm::kPlainEpilogue],
                                 gemm::kGemmEpilogueNames[gemm::kSiluAndMulEpilogue]},
                     .default_value = gemm::kGemmEpilogueNames[gemm::kPlainEpilogue]});
    if (kLayout == gemm::kContiguousLayout)
      all.push_back({.name = gemm::kParamAGather,
                     .help = "1: row r of A is row a_rows[r] / a_row_divisor of the matrix given (launch arguments), "
                             "copied by the producer warps with cp.async (fused_moe's and fused_moe_fp8's gate-and-up "
                             "GEMMs read x by moe_permute's row_to_slot, no gathered copy); 0: A's rows in place, "
                             "through TMA",
                     .choices = {"0", "1"},
                     .default_value = "0"});
    return all;
  }

  std::vector<ArchFamily> arch_families() const override { return {FamilyArchSpecific(90)}; }

 protected:
  // The epilogue param: the 16-bit ops and the contiguous fp8 op (fused_moe's and fused_moe_fp8's
  // gate-and-up GEMMs are contiguous).
  static constexpr bool HasEpilogueParam() { return !kFp8 || kLayout == gemm::kContiguousLayout; }

  // On fp8 inputs silu_and_mul and e4m3 D go together, at tile_n 256 (a tile's 128 columns of D
  // are one scale group).
  static absl::Status CheckFp8Epilogue(const std::string& op, bool silu_and_mul, const DTypeInfo& out,
                                       const gemm::GemmTactic& tactic) {
    const bool codes = std::string_view(out.name) == kFp8CodesInfo.name;
    if (codes && !silu_and_mul)
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": param 'out_dtype' = 'fp8_e4m3' is the silu_and_mul epilogue's output (codes and a scale per row "
              "and 128 columns); set epilogue=silu_and_mul"));
    if (silu_and_mul && !codes)
      return absl::InvalidArgumentError(absl::StrCat(op, ": param 'out_dtype' = '", out.name,
                                                     "' is not allowed with epilogue silu_and_mul: on fp8 inputs it "
                                                     "writes e4m3 codes and scales (out_dtype fp8_e4m3)"));
    if (silu_and_mul && tactic.tile_n != 2 * gemm::kFp8ScaleBlock)
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": param 'tile_n' = '", tactic.tile_n, "' is not allowed with epilogue silu_and_mul: a tile's ",
          gemm::kFp8ScaleBlock, " columns of D are one scale group (tile_n 256)"));
    return absl::OkStatus();
  }

  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const GemmTypes types = !kFp8                ? GemmTypesOf(values)
                            : HasEpilogueParam() ? GroupedFp8GemmTypesOf(values)
                                                 : Fp8GemmTypesOf(values);
    const DTypeInfo& in = *types.in;
    const DTypeInfo& out = *types.out;
    KILN_ABSL_ASSIGN_OR_RETURN(const gemm::GemmTactic tactic, GemmTacticOf(op, values, 1, /*grouped=*/true));
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    const bool silu_and_mul = HasEpilogueParam() &&
                              values.Text(gemm::kParamEpilogue) == gemm::kGemmEpilogueNames[gemm::kSiluAndMulEpilogue];
    if (kFp8) KILN_ABSL_RETURN_IF_ERROR(CheckFp8Epilogue(op, silu_and_mul, out, tactic));
    const bool a_gather = kLayout == gemm::kContiguousLayout && values.Text(gemm::kParamAGather) == "1";
    spec.uri = absl::StrCat(op, "_", in.name, "_o", out.name, "_", GemmTacticUri(tactic, kFp8),
                            silu_and_mul ? "_silu_and_mul" : "", a_gather ? "_ga" : "");
    spec.params = {{gemm::kParamOutDType, out.name}};
    if (!kFp8) spec.params[kParamDType] = in.name;
    for (auto& [key, value] : GemmTacticSpecParams(tactic)) spec.params[key] = value;
    std::vector<std::pair<std::string, std::string>> defines = {{"KILN_GEMM_TIN", in.cuda_type},
                                                                {"KILN_GEMM_TOUT", out.cuda_type},
                                                                {"KILN_GEMM_LAYOUT", std::to_string(kLayout)}};
    for (auto& d : GemmTacticDefines(tactic)) defines.push_back(d);
    if (HasEpilogueParam()) spec.params[gemm::kParamEpilogue] = values.Text(gemm::kParamEpilogue);
    // Only silu_and_mul defines it (grouped_gemm.cu: plain otherwise), so the configs of the plain
    // kernels stay as they were.
    if (silu_and_mul) defines.push_back({"KILN_GEMM_EPILOGUE", "kiln::gemm::kSiluAndMulEpilogue"});
    if (kLayout == gemm::kContiguousLayout) spec.params[gemm::kParamAGather] = a_gather ? "1" : "0";
    if (a_gather) defines.push_back({"KILN_GEMM_A_GATHER", "true"});
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/gemm/grouped_gemm_generator.cpp", defines));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {gemm::kGroupedGemmEntry};
    spec.launch = {{.entry = gemm::kGroupedGemmEntry,
                    .block = gemm::GemmThreads(tactic.tile_m),
                    .dynamic_smem = gemm::GemmSmemBytes(tactic.tile_m, tactic.tile_n, tactic.stages, 1, true),
                    .items_per_block = tactic.tile_m * tactic.tile_n}};
    spec.compile_memory_mb = kGemmCompileMemoryMb;
    return spec;
  }
};

using ContiguousGenerator = GroupedGemmGenerator<gemm::kContiguousLayout, false>;
using MaskedGenerator = GroupedGemmGenerator<gemm::kMaskedLayout, false>;
using ContiguousFp8Generator = GroupedGemmGenerator<gemm::kContiguousLayout, true>;
using MaskedFp8Generator = GroupedGemmGenerator<gemm::kMaskedLayout, true>;
KILN_REGISTER_OP_GENERATOR(ContiguousGenerator);
KILN_REGISTER_OP_GENERATOR(MaskedGenerator);
KILN_REGISTER_OP_GENERATOR(ContiguousFp8Generator);
KILN_REGISTER_OP_GENERATOR(MaskedFp8Generator);

}  // namespace
}  // namespace kiln::kernels
