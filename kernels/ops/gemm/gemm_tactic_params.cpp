#include "kernels/ops/gemm/gemm_tactic_params.h"

#include <span>

#include "absl/strings/str_cat.h"

namespace kiln::kernels {
namespace {

std::vector<std::string> IntChoices(std::span<const int> values) {
  std::vector<std::string> out;
  for (int v : values) out.push_back(std::to_string(v));
  return out;
}

}  // namespace

std::vector<ParamInfo> GemmDTypeParams(const char* dtype_help, const char* out_dtype_help) {
  return {{.name = kParamDType, .help = dtype_help, .choices = DTypeNames(kGemmInTypes)},
          {.name = gemm::kParamOutDType,
           .help = out_dtype_help,
           .choices = DTypeNames(kGemmOutTypes),
           .default_value = kAuto}};
}

GemmTypes GemmTypesOf(const ParamValues& values) {
  const DTypeInfo& in = FindDType(kGemmInTypes, values.Text(kParamDType));
  const DTypeInfo& out = values.IsAuto(gemm::kParamOutDType)
                             ? FindDType(kGemmOutTypes, in.name)
                             : FindDType(kGemmOutTypes, values.Text(gemm::kParamOutDType));
  return {&in, &out};
}

std::vector<ParamInfo> GemmTacticParams() {
  return {
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
  };
}

ParamInfo GemmSplitKParam() {
  return {.name = gemm::kParamSplitK,
          .help = "blocks of a cluster that share a tile, each multiplying a slice of K (1: no split); for shapes "
                  "with too few tiles to fill the GPU",
          .choices = IntChoices(gemm::kSplitKChoices),
          .default_value = "1"};
}

ParamInfo GemmMulticastParam() {
  return {.name = gemm::kParamMulticast,
          .help = "blocks of a cluster that share their tile of B, each loading part of it with TMA multicast into "
                  "all (1: none; 2: pairs of vertically adjacent tiles); not with split_k",
          .choices = IntChoices(gemm::kMulticastChoices),
          .default_value = "1"};
}

absl::StatusOr<gemm::GemmTactic> GemmTacticOf(std::string_view op, const ParamValues& values, int split_k, bool grouped,
                                              int multicast) {
  gemm::GemmTactic tactic{values.Int(gemm::kParamTileM),
                          values.Int(gemm::kParamTileN),
                          0,
                          values.Int(gemm::kParamGroupM),
                          split_k,
                          multicast};
  if (split_k > 1 && multicast > 1) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(op), ": param 'multicast' = '", multicast,
                                                   "' is not allowed with split_k = ", split_k,
                                                   " (a cluster either splits K or shares B)"));
  }
  const int max_stages = gemm::GemmMaxStages(tactic.tile_m, tactic.tile_n, split_k, grouped, multicast);
  if (max_stages == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(op), ": param 'split_k' = '", split_k, "' is not allowed for tile ", tactic.tile_m,
                     "x", tactic.tile_n, ": its partial tile and ", gemm::kMinStages, " stages need ",
                     gemm::GemmSmemBytes(tactic.tile_m, tactic.tile_n, gemm::kMinStages, split_k, grouped),
                     " bytes of shared memory, over the ", gemm::kMaxSmemBytes, " a block may have"));
  }
  tactic.stages = values.IsAuto(gemm::kParamStages) ? max_stages : values.Int(gemm::kParamStages);
  if (!gemm::GemmTacticFits(tactic, grouped)) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(op), ": param 'stages' = '", tactic.stages, "' is not allowed for tile ", tactic.tile_m, "x",
        tactic.tile_n, split_k > 1 ? absl::StrCat(" split ", split_k, " ways") : "", ": ", tactic.stages,
        " stages need ", gemm::GemmSmemBytes(tactic.tile_m, tactic.tile_n, tactic.stages, split_k, grouped, multicast),
        " bytes of shared memory, over the ", gemm::kMaxSmemBytes,
        " a block may have; allowed here: ", gemm::kMinStages, "..", max_stages));
  }
  return tactic;
}

ParamInfo Fp8GemmOutDTypeParam() {
  return {.name = gemm::kParamOutDType,
          .help = "element type of D",
          .choices = DTypeNames(kFp8GemmOutTypes),
          .default_value = "bf16"};
}

GemmTypes Fp8GemmTypesOf(const ParamValues& values) {
  return {&kE4m3Info, &FindDType(kFp8GemmOutTypes, values.Text(gemm::kParamOutDType))};
}

ParamInfo GroupedFp8GemmOutDTypeParam() {
  return {.name = gemm::kParamOutDType,
          .help = "element type of D; fp8_e4m3 (with epilogue silu_and_mul only): codes, and a scale per row "
                  "and 128 columns",
          .choices = DTypeNames(kGroupedFp8GemmOutTypes),
          .default_value = "bf16"};
}

GemmTypes GroupedFp8GemmTypesOf(const ParamValues& values) {
  return {&kE4m3Info, &FindDType(kGroupedFp8GemmOutTypes, values.Text(gemm::kParamOutDType))};
}

std::string GemmTacticUri(const gemm::GemmTactic& t, bool fp8) {
  return absl::StrCat("t", t.tile_m, "x", t.tile_n, "x", fp8 ? gemm::kFp8ScaleBlock : gemm::kTileK, "s", t.stages, "g",
                      t.group_m, t.split_k > 1 ? absl::StrCat("k", t.split_k) : "",
                      t.multicast > 1 ? absl::StrCat("m", t.multicast) : "");
}

std::vector<std::pair<std::string, std::string>> GemmTacticSpecParams(const gemm::GemmTactic& t) {
  return {{gemm::kParamTileM, std::to_string(t.tile_m)},
          {gemm::kParamTileN, std::to_string(t.tile_n)},
          {gemm::kParamStages, std::to_string(t.stages)},
          {gemm::kParamGroupM, std::to_string(t.group_m)}};
}

std::vector<std::pair<std::string, std::string>> GemmTacticDefines(const gemm::GemmTactic& t) {
  std::vector<std::pair<std::string, std::string>> defines = {{"KILN_GEMM_TILE_M", std::to_string(t.tile_m)},
                                                              {"KILN_GEMM_TILE_N", std::to_string(t.tile_n)},
                                                              {"KILN_GEMM_STAGES", std::to_string(t.stages)},
                                                              {"KILN_GEMM_GROUP_M", std::to_string(t.group_m)}};
  // Only a multicast tactic defines it (split_k_cluster.cuh: 1 otherwise), so the configs without
  // it, the grouped ops' always, stay as they were.
  if (t.multicast > 1) defines.push_back({"KILN_GEMM_MULTICAST", std::to_string(t.multicast)});
  return defines;
}

}  // namespace kiln::kernels
