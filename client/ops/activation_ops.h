// The one path of the activation APIs (kiln::ops::silu_and_mul, ... and the C ABI's
// kiln_silu_and_mul, ...): trace the call when KILN_LOGLEVEL asks for it
// (client/diag/call_trace.h), plan, launch. `api` names the caller in messages and log lines,
// and must be a string literal.
#pragma once

#include "client/ops/activation_plan.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

Status ActAndMulWithApi(ActivationOp op, const char* api, const TensorView& out, const TensorView& input,
                        void* stream);

}  // namespace kiln::client
