// The gemm family's generator (op "gemm"): one compilation unit (kernels/src/gemm/gemm.cu)
// specialized on the input and output types and the tactic (kiln::gemm::GemmTactic: tile,
// stages, raster group, split-K), which the URI names: gemm_bf16_obf16_t128x256x64s4g8, and
// with a split gemm_bf16_obf16_t64x256x64s4g8k8. M, N and K are launch arguments. Contract:
// kiln/gemm/gemm_contract.h; docs/kernels-gemm.md.
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr const char* kUnitPath = "src/gemm/gemm.cu";
constexpr DTypeInfo kInTypes[] = {kBf16Info, kFp16Info};
constexpr DTypeInfo kOutTypes[] = {kBf16Info, kFp16Info, kFp32Info};

// Host memory of one compile: see the measurement in tests/kernels/gemm_compile_test.cpp
// (peak RSS of a process compiling tactics in turn); 512 MB, the engine's default, holds it.
constexpr int64_t kCompileMemoryMb = 512;

std::vector<std::string> IntChoices(std::span<const int> values) {
  std::vector<std::string> out;
  for (int v : values) out.push_back(std::to_string(v));
  return out;
}

class GemmGenerator : public OpGenerator {
 public:
  std::string_view name() const override { return gemm::kGemmOp; }
  std::string_view family() const override { return "gemm"; }
  std::string_view description() const override {
    return "D[M, N] = A[M, K] . B[N, K]^T (+ bias[N]) (+ beta * C[M, N]) on Hopper tensor cores (TMA, mbarrier "
           "pipeline, wgmma, warp-specialized persistent blocks), fp32 accumulation; A and B K-major";
  }

  std::vector<ParamInfo> params() const override {
    return {
        {.name = kParamDType, .help = "element type of A, B and bias", .choices = DTypeNames(kInTypes)},
        {.name = gemm::kParamOutDType,
         .help = "element type of D and C. auto: dtype",
         .choices = DTypeNames(kOutTypes),
         .default_value = kAuto},
        {.name = gemm::kParamTileM,
         .help = "rows of D per tile: 64 per consumer warp-group (64: one, 128: two)",
         .choices = IntChoices(gemm::kTileMChoices),
         .default_value = "128"},
        {.name = gemm::kParamTileN,
         .help = "columns of D per tile (the wgmma N)",
         .choices = IntChoices(gemm::kTileNChoices),
         .default_value = "128"},
        {.name = gemm::kParamStages,
         .kind = ParamInfo::Kind::kInt,
         .help = "pipeline stages of (tile_m + tile_n) x 64 elements; at most what fits in 227 KiB of shared "
                 "memory. auto: the most that fit",
         .min = gemm::kMinStages,
         .max = gemm::kMaxStages,
         .default_value = kAuto},
        {.name = gemm::kParamGroupM,
         .kind = ParamInfo::Kind::kInt,
         .help = "tile rows per raster group (the blocks walk all tile columns of a group before the next)",
         .min = 1,
         .max = gemm::kMaxGroupM,
         .default_value = "8"},
        {.name = gemm::kParamSplitK,
         .help = "blocks of a cluster that share a tile, each multiplying a slice of K (1: no split); for shapes "
                 "with too few tiles to fill the GPU",
         .choices = IntChoices(gemm::kSplitKChoices),
         .default_value = "1"},
    };
  }

  // TMA, mbarrier transactions, wgmma and setmaxnreg exist only in sm_90a.
  std::vector<ArchFamily> arch_families() const override { return {FamilyArchSpecific(90)}; }

 protected:
  absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const override {
    const std::string op(name());
    const DTypeInfo& in = FindDType(kInTypes, values.Text(kParamDType));
    const DTypeInfo& out = values.IsAuto(gemm::kParamOutDType)
                               ? FindDType(kOutTypes, in.name)
                               : FindDType(kOutTypes, values.Text(gemm::kParamOutDType));
    gemm::GemmTactic tactic{values.Int(gemm::kParamTileM), values.Int(gemm::kParamTileN), 0,
                            values.Int(gemm::kParamGroupM), values.Int(gemm::kParamSplitK)};
    const int max_stages = gemm::GemmMaxStages(tactic.tile_m, tactic.tile_n, tactic.split_k);
    if (max_stages == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": param 'split_k' = '", tactic.split_k, "' is not allowed for tile ", tactic.tile_m, "x",
                       tactic.tile_n, ": its partial tile and ", gemm::kMinStages, " stages need ",
                       gemm::GemmSmemBytes(tactic.tile_m, tactic.tile_n, gemm::kMinStages, tactic.split_k),
                       " bytes of shared memory, over the ", gemm::kMaxSmemBytes, " a block may have"));
    }
    tactic.stages = values.IsAuto(gemm::kParamStages) ? max_stages : values.Int(gemm::kParamStages);
    if (!gemm::GemmTacticFits(tactic)) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": param 'stages' = '", tactic.stages, "' is not allowed for tile ", tactic.tile_m, "x", tactic.tile_n,
          tactic.split_k > 1 ? absl::StrCat(" split ", tactic.split_k, " ways") : "", ": ", tactic.stages,
          " stages need ", gemm::GemmSmemBytes(tactic.tile_m, tactic.tile_n, tactic.stages, tactic.split_k),
          " bytes of shared memory, over the ", gemm::kMaxSmemBytes,
          " a block may have; allowed here: ", gemm::kMinStages, "..", max_stages));
    }
    KILN_ABSL_ASSIGN_OR_RETURN(SourceFile unit, UnitFromTree(op, tree, kUnitPath));

    JitSpec spec;
    spec.uri = absl::StrCat(op, "_", in.name, "_o", out.name, "_t", tactic.tile_m, "x", tactic.tile_n, "x",
                            gemm::kTileK, "s", tactic.stages, "g", tactic.group_m,
                            tactic.split_k > 1 ? absl::StrCat("k", tactic.split_k) : "");
    spec.params = {{kParamDType, in.name},
                   {gemm::kParamOutDType, out.name},
                   {gemm::kParamTileM, std::to_string(tactic.tile_m)},
                   {gemm::kParamTileN, std::to_string(tactic.tile_n)},
                   {gemm::kParamStages, std::to_string(tactic.stages)},
                   {gemm::kParamGroupM, std::to_string(tactic.group_m)},
                   {gemm::kParamSplitK, std::to_string(tactic.split_k)}};
    spec.headers.push_back(ConfigHeader(op, spec.uri, "kernels/ops/gemm/gemm_generator.cpp",
                                        {{"KILN_GEMM_TIN", in.cuda_type},
                                         {"KILN_GEMM_TOUT", out.cuda_type},
                                         {"KILN_GEMM_TILE_M", std::to_string(tactic.tile_m)},
                                         {"KILN_GEMM_TILE_N", std::to_string(tactic.tile_n)},
                                         {"KILN_GEMM_STAGES", std::to_string(tactic.stages)},
                                         {"KILN_GEMM_GROUP_M", std::to_string(tactic.group_m)},
                                         {"KILN_GEMM_SPLIT_K", std::to_string(tactic.split_k)}}));
    spec.units.push_back(std::move(unit));
    spec.nvrtc_options = {"-std=c++17"};
    spec.entries = {gemm::kGemmEntry};
    spec.launch = {{.entry = gemm::kGemmEntry,
                    .block = gemm::GemmThreads(tactic.tile_m),
                    .dynamic_smem = gemm::GemmSmemBytes(tactic.tile_m, tactic.tile_n, tactic.stages, tactic.split_k),
                    .items_per_block = tactic.tile_m * tactic.tile_n}};
    spec.compile_memory_mb = kCompileMemoryMb;
    return spec;
  }
};

KILN_REGISTER_OP_GENERATOR(GemmGenerator);

}  // namespace
}  // namespace kiln::kernels
