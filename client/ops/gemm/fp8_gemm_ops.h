// The launch of a validated fp8_gemm plan with a given tactic, for callers that choose the
// tactic themselves: the [gpu][gemm] tests that run every tactic of fp8_gemm's space, and
// kiln-bench's forced-tactic backends (diagnostic). kiln::ops::fp8_gemm plans, takes the
// heuristic's tactic (ChooseFp8GemmTactic) and launches in one call.
#pragma once

#include "client/ops/gemm/fp8_gemm_plan.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"

namespace kiln::client {

// INVALID_ARGUMENT when `tactic` is not in fp8_gemm's space (Fp8GemmTacticFits).
Status LaunchFp8GemmPlan(const Fp8GemmPlan& plan, const gemm::GemmTactic& tactic, void* stream);

}  // namespace kiln::client
