// The embedded engine as client core sees it: kilnd's engine (generators, NVRTC, the cache
// folder and its per-key file locks) run in this process when no daemon does. Declared here,
// defined by client/embedded/ (which links the engine from server/) or, in a client built
// without it (-DKILN_CLIENT_EMBEDDED=OFF: no NVRTC in the process), by a twin that says so.
#pragma once

#include <string>

#include "client/core/rpc/cubin_fetch.h"
#include "kiln/status.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::client {

// Whether this library holds the embedded engine.
bool EmbeddedEngineBuiltIn();

// One kernel from the engine, started at the first call (its settings: kilnd's engine settings
// from the environment, KILN_CACHE_DIR, KILN_KERNELS_DIR, KILN_MAX_JOBS, ...). Errors read like a
// daemon's: "GetKernel <request>: <why>". The reply carries the cubin's bytes, never a path.
StatusOr<FetchedCubin> EmbeddedFetch(const v1::GetKernelRequest& request, const FetchOptions& options);

// The NVRTC version the engine compiles with ("13.0"), for tuning environments (what a daemon's
// GetTuningInfo says).
StatusOr<std::string> EmbeddedNvrtcVersion();

// "cache /home/u/.cache/kiln, kernels /usr/share/kiln/kernels" (starting the engine if it has
// not started), or why it cannot start.
StatusOr<std::string> EmbeddedEngineSummary();

}  // namespace kiln::client
