// The process-wide client: which daemon to ask, how long to wait, and what it has done so far.
// Nothing here is required: the first op or load connects to KILN_SOCKET, or to the default
// socket of kilnd (/run/kiln/kilnd.sock for root, $XDG_RUNTIME_DIR/kiln/kilnd.sock or
// /tmp/kiln-<uid>/kilnd.sock otherwise). When no daemon listens there, the library compiles in
// this process instead (the embedded engine: the same generators, NVRTC and cache folder as
// kilnd), unless told otherwise (ClientMode, KILN_MODE).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "kiln/export.h"
#include "kiln/status.h"

namespace kiln {

// Where kernels come from.
enum class ClientMode {
  kFromEnvironment,  // KILN_MODE: "auto", "daemon" or "embedded"; unset or empty: auto
  kAuto,             // the daemon when one listens at a unix socket; else the embedded engine
  kDaemon,           // only the daemon: none answering is an error (production nodes)
  kEmbedded,         // only the embedded engine, even when a daemon runs
};

struct ClientOptions {
  // A unix socket path ("/run/kiln/kilnd.sock") or a gRPC target ("unix:/path",
  // "localhost:7070"). Empty: KILN_SOCKET when set, else kilnd's default socket.
  std::string socket;
  // How long one kernel request may take, a compile on the daemon included.
  std::chrono::milliseconds rpc_timeout = std::chrono::minutes(5);
  // On a unix socket, read the daemon's read-only blob file instead of receiving the bytes.
  bool prefer_blob_path = true;
  // On a unix socket, ask kilnd over its same-node protocol (GetKernel without gRPC: tens of
  // microseconds less per fetch); gRPC when the daemon does not speak it.
  bool local_fetch = true;
  // Check every cubin's SHA-256 even when it comes from this node's daemon. By default such a
  // cubin is checked against the CRC-32C the daemon took from bytes whose SHA-256 it had
  // checked (docs/client.md, "What a call costs"); a remote daemon's are always SHA-256 checked.
  bool full_checksum = false;
  // Shown in the daemon's job waiter lists. Empty: "<process name>[<pid>]".
  std::string client_id;
  // A TCP target is TLS or, by name, plaintext; a unix socket ignores these. When all four are
  // unset, KILN_TLS_CA, KILN_TLS_CERT, KILN_TLS_KEY and KILN_INSECURE are read instead.
  std::string tls_ca;     // PEM CA file that signed kilnd's certificate (required for TLS)
  std::string tls_cert;   // PEM client certificate file, for a kilnd started with --tls-client-ca
  std::string tls_key;    // its private key file
  bool insecure = false;  // plaintext TCP, for a kilnd started with --insecure
  // The daemon, the embedded engine, or whichever is there (decided at the first kernel
  // request and kept until the next Configure). A TCP target is always the daemon.
  ClientMode mode = ClientMode::kFromEnvironment;
};

// Replaces the options for later requests. Kernels already loaded stay loaded and cached.
// INVALID_ARGUMENT (the options unchanged) for a TCP target with neither TLS nor insecure, or a
// TLS file that cannot be read.
KILN_API Status Configure(const ClientOptions& options);
KILN_API ClientOptions CurrentOptions();

// The gRPC target requests go to now ("unix:/tmp/kiln-1000/kilnd.sock").
KILN_API std::string DaemonTarget();

// Which mode kernel requests use, and why, deciding it now if no request has:
// "daemon at unix:/run/kiln/kilnd.sock (KILN_MODE unset: auto, and a daemon listens there)" or
// "embedded: compiling in this process, cache /home/u/.cache/kiln (auto: no daemon at ...)".
// An invalid KILN_MODE, or an embedded engine that cannot start, is said too.
KILN_API std::string DescribeMode();

// Asks the daemon for its cache stats: OK when it answers within `timeout`, UNAVAILABLE with
// the socket and how to start kilnd otherwise.
KILN_API Status Ping(std::chrono::milliseconds timeout = std::chrono::seconds(5));

// Counters since the process started (for tests, logs and metrics).
struct ClientStats {
  uint64_t get_kernel_rpcs = 0;   // GetKernel calls sent to the daemon
  uint64_t rpc_failures = 0;      // of those, the ones that failed
  uint64_t modules_loaded = 0;    // cuLibraryLoadData calls
  uint64_t blob_path_reads = 0;   // cubins read from the daemon's blob files
  uint64_t op_fast_hits = 0;      // ops calls served from the in-process launch cache
  uint64_t op_fast_misses = 0;    // ops calls that had to resolve their kernel first
  uint64_t embedded_fetches = 0;  // kernels the embedded engine gave (compiled or from its cache)
  uint64_t local_fetches = 0;     // of get_kernel_rpcs, those answered over the same-node protocol
};
KILN_API ClientStats GetClientStats();

// The library's version ("0.1.0"); compare with KILN_VERSION_STRING of the headers.
KILN_API const char* Version();

}  // namespace kiln
