// The launch of a validated RMSNorm plan, for callers that adjust a plan before launching it:
// kiln-bench's forced-vector-width backends (a diagnostic tactic control). The ops themselves
// (kiln/ops/norm.h) plan and launch in one call.
#pragma once

#include "client/ops/norm/norm_plan.h"
#include "kiln/status.h"

namespace kiln::client {

Status LaunchNormPlan(const NormPlan& plan, void* stream);

}  // namespace kiln::client
