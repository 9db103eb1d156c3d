// RunActAndMul: a validated ActivationPlan → the right kernel specialization in the caller's
// context → one launch on the caller's stream. The first call of an (op, dtype, vec, context)
// asks the daemon and loads; every later one, whatever its d and rows, is a cache lookup and
// cuLaunchKernelEx.
#pragma once

#include "client/ops/activation_plan.h"
#include "kiln/status.h"

namespace kiln::client {

Status RunActAndMul(const ActivationPlan& plan, void* stream);

}  // namespace kiln::client
