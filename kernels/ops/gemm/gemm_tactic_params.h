// The tactic params that gemm and grouped_gemm share (tile_m, tile_n, stages, group_m): their
// ParamInfo, the tactic a request names (stages "auto": the most that fit), refused with the
// shared-memory figures when it does not fit, and the tactic's part of the URI and the config.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/jit/op_params.h"
#include "kiln/gemm/gemm_contract.h"

namespace kiln::kernels {

// tile_m, tile_n, stages, group_m, in that order.
std::vector<ParamInfo> GemmTacticParams();
// split_k (gemm only).
ParamInfo GemmSplitKParam();

// The tactic of `values` (split_k given: gemm's own param; grouped_gemm never splits).
absl::StatusOr<gemm::GemmTactic> GemmTacticOf(std::string_view op, const ParamValues& values, int split_k,
                                              bool grouped);

// "t128x256x64s4g8", "k<split>" after it when split.
std::string GemmTacticUri(const gemm::GemmTactic& tactic);

// The spec params and the config defines (KILN_GEMM_TILE_M ... KILN_GEMM_GROUP_M) of the tactic.
std::vector<std::pair<std::string, std::string>> GemmTacticSpecParams(const gemm::GemmTactic& tactic);
std::vector<std::pair<std::string, std::string>> GemmTacticDefines(const gemm::GemmTactic& tactic);

}  // namespace kiln::kernels
