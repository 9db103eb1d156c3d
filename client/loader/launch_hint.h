// A launch hint of an op generator (GetKernelResponse.launch, e.g. "block" = "256") read as an
// integer: the shape an op's kernel expects, which the client must not guess.
#pragma once

#include <cstdint>

#include "kiln/kernel.h"
#include "kiln/status.h"

namespace kiln::client {

// FAILED_PRECONDITION naming the module when the hint is missing or not an integer in
// [lo, hi].
StatusOr<int64_t> LaunchHint(const ModuleInfo& info, const char* key, int64_t lo, int64_t hi);

}  // namespace kiln::client
