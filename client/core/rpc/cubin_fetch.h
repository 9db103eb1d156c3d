// FetchCubin: one kernel from the daemon as verified bytes. On a unix socket it asks over the
// same-node protocol (client/core/rpc/local_fetch_client.h; gRPC when the daemon does not speak
// it) for the daemon's read-only blob file and reads it (no copy of the bytes); a blob that
// vanished (evicted meanwhile) or fails its checksum is asked for again as bytes, once. The
// bytes are checked against the reply's SHA-256, or on a unix socket against the CRC-32C the
// daemon took from bytes it had checked by SHA-256 (proto/crc32c.h). Only the RPC and
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
  bool local_fetch = true;       // the same-node protocol first, on a unix socket
  bool full_checksum = false;    // SHA-256 even for this node's daemon (else its CRC-32C)
  std::string client_id;
};

struct FetchedCubin {
  v1::GetKernelResponse reply;  // as the daemon sent it, less the cubin bytes
  std::string cubin;            // verified: against reply.sha256(), or on a unix socket reply.cubin_crc32c()
  std::string blob_path;        // the file it was read from, or empty
  double rpc_ms = 0;            // GetKernel round trip(s)
  double verify_ms = 0;         // blob read and checksum
  bool local_fetch = false;     // asked over the same-node protocol (else gRPC)
  bool embedded = false;        // from this process's embedded engine, not a daemon (rpc_ms: its time)
};

// `request` is sent as it is, with the fetch's client_id and prefer_blob_path (from `options`)
// in place of any it carries.
StatusOr<FetchedCubin> FetchCubin(const DaemonConnection& connection, const v1::GetKernelRequest& request,
                                  const FetchOptions& options);

// FetchCubin through the process-wide client settings (kiln::Configure): from the daemon or
// the embedded engine, as their KernelSource decides.
StatusOr<FetchedCubin> FetchCubin(const v1::GetKernelRequest& request);

}  // namespace kiln::client
