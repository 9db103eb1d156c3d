// The launches of validated moe_permute and moe_unpermute plans, for the ops that run them as
// steps of a larger call (fused_moe) without a call record of their own. kiln::ops::moe_permute
// and moe_unpermute plan and launch in one call.
#pragma once

#include "client/ops/moe/moe_plan.h"
#include "kiln/status.h"

namespace kiln::client {

// The single-block permutation, then with the plan's gather the gather, on `stream`.
Status LaunchMoePermutePlan(const MoePermutePlan& plan, const char* api, void* stream);
// The combine (nothing for no tokens); `programmatic`: as a programmatic dependent of the kernel
// before it (the kernel waits for it before reading anything: kiln/moe/moe_unpermute.cuh).
Status LaunchMoeUnpermutePlan(const MoeUnpermutePlan& plan, const char* api, void* stream, bool programmatic = false);

}  // namespace kiln::client
