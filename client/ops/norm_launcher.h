// RunNorm: a validated NormPlan → the right kernel specialization in the caller's context →
// one launch on the caller's stream. The first call of a (dtype, hidden, vec, context) asks
// the daemon and loads; every later one is a cache lookup and cuLaunchKernelEx.
#pragma once

#include "client/ops/norm_plan.h"
#include "kiln/status.h"

namespace kiln::client {

Status RunNorm(const NormPlan& plan, void* stream);

}  // namespace kiln::client
