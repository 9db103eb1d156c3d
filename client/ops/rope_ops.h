// The one path of both rope APIs (kiln::ops::apply_rope* and the C ABI's kiln_apply_rope*):
// trace the call when KILN_LOGLEVEL asks for it (client/diag/call_trace.h), plan, launch.
// `api` names the caller in messages and log lines, and must be a string literal.
#pragma once

#include "kiln/ops/rope.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

Status ApplyRope(const char* api, const TensorView& q, const TensorView& k, const TensorView& positions,
                 const ops::RopeOptions& options, void* stream);
Status ApplyRopeWithCosSinCache(const char* api, const TensorView& q, const TensorView& k,
                                const TensorView& positions, const TensorView& cos_sin_cache,
                                bool interleaved, void* stream);

}  // namespace kiln::client
