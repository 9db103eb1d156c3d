// Where kilnd listens and keeps its workspaces by default: the one rule both the daemon and
// every client (the CLI's doctor among them) follow.
#pragma once

#include <string>

namespace kiln::proto {

// The environment variable that overrides the default socket path for daemon and clients.
inline constexpr const char* kSocketEnv = "KILN_SOCKET";

// The default unix socket path, before KILN_SOCKET is considered:
//   root:   /run/kiln/kilnd.sock                  (the system service)
//   others: $XDG_RUNTIME_DIR/kiln/kilnd.sock      (when XDG_RUNTIME_DIR is set)
//           /tmp/kiln-<uid>/kilnd.sock            (otherwise)
std::string DefaultSocketPath();

// The default artifact workspace (kilnd --cache-dir), before KILN_CACHE_DIR is considered:
//   root: /var/cache/kiln; others: $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln.
std::string DefaultCacheDir();
// The default generated-sources workspace for a cache folder: <cache_dir>/generated.
std::string DefaultGenDir(const std::string& cache_dir);

// KILN_SOCKET when set and non-empty, else DefaultSocketPath().
std::string ResolveSocketPath();

// A gRPC target for a socket path ("unix:/run/kiln/kilnd.sock"), or the text unchanged when
// it already names a scheme or a host:port (e.g. "localhost:7070").
std::string GrpcTargetFor(const std::string& socket_or_address);

}  // namespace kiln::proto
