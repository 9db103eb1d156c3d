// The launch of a validated grouped_gemm plan (either layout) with a given tactic, for callers
// that choose the tactic themselves: the [gpu][gemm] tests that run every tile, and kiln-bench's
// forced-tactic backends (diagnostic). kiln::ops::grouped_gemm plans, takes the tactic of
// the call (forced, tuned or the heuristic's) and launches in one call.
#pragma once

#include "client/ops/gemm/gemm_tactic_controls.h"
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

// The only tile width of grouped_fp8_gemm's silu_and_mul epilogue into e4m3: a tile's 128
// columns of D are one scale group of the codes.
constexpr int kCodesTileN = 2 * gemm::kFp8ScaleBlock;

// Whether `controls` let a grouped_fp8_gemm call with that epilogue run: not where
// KILN_FORCE_TACTIC forces grouped_fp8_gemm to another tile width (the call is then refused,
// naming the variable). GroupedFp8CodesTileAllowed: this process's controls (true where they are
// not valid: every grouped call reports that itself). fused_moe_fp8 asks before it plans its
// gate-and-up GEMM with the epilogue, and otherwise quantizes in a kernel of its own, so that a
// forced tactic holds for both its GEMMs.
bool CodesTileAllowedBy(const GemmTacticControls& controls);
bool GroupedFp8CodesTileAllowed();

// The tactic the grouped op of the plan would launch for `plan` now: KILN_FORCE_TACTIC's, else the tuned one of its
// bucket, else the heuristic's first that no blocklist blocks (with `skip_tuned`, the last even
// when a tuned result exists: what kiln::tune compares against).
StatusOr<ChosenGemmTactic> GroupedGemmTacticOfCall(const GroupedGemmPlan& plan, bool skip_tuned = false);

}  // namespace kiln::client
