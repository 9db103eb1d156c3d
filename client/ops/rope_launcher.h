// RunRope: a validated RopePlan → the right kernel specialization in the caller's context →
// one launch on the caller's stream. The first call of a (op, dtype, rotary_dim, style,
// positions dtype, vec, context) asks the daemon and loads; every later one is a cache lookup
// and cuLaunchKernelEx.
#pragma once

#include "client/ops/rope_plan.h"
#include "kiln/status.h"

namespace kiln::client {

Status RunRope(const RopePlan& plan, void* stream);

}  // namespace kiln::client
