// The one path of both RMSNorm APIs (kiln::ops::rms_norm / fused_add_rms_norm and the C ABI's
// kiln_rms_norm / kiln_fused_add_rms_norm): trace the call when KILN_LOGLEVEL asks for it
// (client/diag/call_trace.h), plan, launch. `api` names the caller in messages and log lines,
// and must be a string literal.
#pragma once

#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

Status RmsNormWithApi(const char* api, const TensorView& out, const TensorView& input, const TensorView& weight,
                      double eps, void* stream);
Status FusedAddRmsNormWithApi(const char* api, const TensorView& input, const TensorView& residual,
                              const TensorView& weight, double eps, void* stream);

}  // namespace kiln::client
