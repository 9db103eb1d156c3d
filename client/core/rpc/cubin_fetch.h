// FetchCubin: one kernel from the daemon as verified bytes. On a unix socket it asks for the
// daemon's read-only blob file and reads it (no copy through gRPC); a blob that vanished
// (evicted meanwhile) or fails its checksum is asked for again as bytes, once. Only the RPC and
// the check: what the caller does with the bytes, and the loader-log line that says so, are the
// loader's (client/core/loader/).
#pragma once

#include <chrono>
#include <string>

#include "client/core/rpc/daemon_connection.h"
#include "kiln/status.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::client {

struct FetchOptions {
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  bool prefer_blob_path = true;  // only honoured on a unix socket
  std::string client_id;
};

struct FetchedCubin {
  v1::GetKernelResponse reply;  // as the daemon sent it, less the cubin bytes
  std::string cubin;            // SHA-256 verified against reply.sha256()
  std::string blob_path;        // the file it was read from, or empty
  double rpc_ms = 0;            // GetKernel round trip(s)
  double verify_ms = 0;         // blob read and SHA-256 check
  bool embedded = false;        // from this process's embedded engine, not a daemon (rpc_ms: its time)
};

StatusOr<FetchedCubin> FetchCubin(const DaemonConnection& connection, v1::GetKernelRequest request,
                                  const FetchOptions& options);

// FetchCubin through the process-wide client settings (kiln::Configure): from the daemon or
// the embedded engine, as their KernelSource decides.
StatusOr<FetchedCubin> FetchCubin(const v1::GetKernelRequest& request);

}  // namespace kiln::client
