// The launch of a validated grouped_gemm plan (either layout) with a given tactic, for callers
// that choose the tactic themselves: the [gpu][gemm] tests that run every tile, and kiln-bench's
// forced-tactic backends (diagnostic). kiln::ops::grouped_gemm plans, takes the heuristic's
// tactic (ChooseGroupedGemmTactic) and launches in one call.
#pragma once

#include "client/ops/gemm/grouped_gemm_plan.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"

namespace kiln::client {

// INVALID_ARGUMENT when `tactic` is not in grouped_gemm's space (GemmTacticFits(grouped)).
Status LaunchGroupedGemmPlan(const GroupedGemmPlan& plan, const gemm::GemmTactic& tactic, void* stream);

}  // namespace kiln::client
