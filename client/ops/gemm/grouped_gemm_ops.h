// The launch of a validated grouped_gemm plan (either layout) with a given tactic, for callers
// that choose the tactic themselves: the [gpu][gemm] tests that run every tile, and kiln-bench's
// forced-tactic backends (diagnostic). kiln::ops::grouped_gemm plans, takes the tactic of
// the call (forced, tuned or the heuristic's) and launches in one call.
#pragma once

#include "client/ops/gemm/gemm_tuning.h"
#include "client/ops/gemm/grouped_gemm_plan.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"

namespace kiln::client {

// INVALID_ARGUMENT when `tactic` is not in grouped_gemm's space (GemmTacticFits(grouped)).
Status LaunchGroupedGemmPlan(const GroupedGemmPlan& plan, const gemm::GemmTactic& tactic, void* stream);

// The launch of a validated plan with the tactic of the call (forced, tuned or the heuristic's, as
// kiln::ops::grouped_gemm takes it), for the ops that run a grouped GEMM as a step (fused_moe).
Status LaunchGroupedGemmPlanOfCall(const GroupedGemmPlan& plan, void* stream);

// The tactic the grouped op of the plan would launch for `plan` now: KILN_FORCE_TACTIC's, else the tuned one of its
// bucket, else the heuristic's first that no blocklist blocks (with `skip_tuned`, the last even
// when a tuned result exists: what kiln::tune compares against).
StatusOr<ChosenGemmTactic> GroupedGemmTacticOfCall(const GroupedGemmPlan& plan, bool skip_tuned = false);

}  // namespace kiln::client
