// The launch of a validated gemm plan with a given tactic, for callers that choose the tactic
// themselves: the [gpu][gemm] tests that run every tactic of the space, and kiln-bench's
// forced-tactic backends (diagnostic). kiln::ops::gemm plans, takes the heuristic's tactic
// (ChooseGemmTactic) and launches in one call.
#pragma once

#include "client/ops/gemm/gemm_plan.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"

namespace kiln::client {

// INVALID_ARGUMENT when `tactic` is not in the space (GemmTacticFits).
Status LaunchGemmPlan(const GemmPlan& plan, const gemm::GemmTactic& tactic, void* stream);

}  // namespace kiln::client
