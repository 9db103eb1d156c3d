// The embedded engine's twin in a client built without it (-DKILN_CLIENT_EMBEDDED=OFF): no
// NVRTC and no engine in the process; kernels come from a daemon only, and these say so.
#include "client/core/rpc/embedded_fetch.h"

namespace kiln::client {

bool EmbeddedEngineBuiltIn() { return false; }

StatusOr<FetchedCubin> EmbeddedFetch(const v1::GetKernelRequest&, const FetchOptions&) {
  return Status(StatusCode::kFailedPrecondition,
                "this libkiln_client was built without the embedded engine (KILN_CLIENT_EMBEDDED=OFF)");
}

StatusOr<std::string> EmbeddedNvrtcVersion() {
  return Status(StatusCode::kFailedPrecondition, "no embedded engine in this build (KILN_CLIENT_EMBEDDED=OFF)");
}

StatusOr<std::string> EmbeddedEngineSummary() {
  return Status(StatusCode::kFailedPrecondition, "no embedded engine in this build (KILN_CLIENT_EMBEDDED=OFF)");
}

}  // namespace kiln::client
