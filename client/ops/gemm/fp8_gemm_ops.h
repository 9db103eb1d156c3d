// The launch of a validated fp8_gemm plan with a given tactic, for callers that choose the
// tactic themselves: the [gpu][gemm] tests that run every tactic of fp8_gemm's space, and
// kiln-bench's forced-tactic backends (diagnostic). kiln::ops::fp8_gemm plans, takes the
// tactic of the call (forced, tuned or the heuristic's) and launches in one call.
#pragma once

#include "client/ops/gemm/fp8_gemm_plan.h"
#include "client/ops/gemm/gemm_tuning.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"

namespace kiln::client {

// INVALID_ARGUMENT when `tactic` is not in fp8_gemm's space (Fp8GemmTacticFits: gemm's, splits
// included).
Status LaunchFp8GemmPlan(const Fp8GemmPlan& plan, const gemm::GemmTactic& tactic, void* stream);

// The tactic kiln::ops::fp8_gemm would launch for `plan` now: KILN_FORCE_TACTIC's, else the tuned one of its
// bucket, else the heuristic's first that no blocklist blocks (with `skip_tuned`, the last even
// when a tuned result exists: what kiln::tune compares against).
StatusOr<ChosenGemmTactic> Fp8GemmTacticOfCall(const Fp8GemmPlan& plan, bool skip_tuned = false);

}  // namespace kiln::client
