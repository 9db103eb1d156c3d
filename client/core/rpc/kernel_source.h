// KernelSource: where this process's kernel requests go, the daemon or the embedded engine
// (embedded_fetch.h), from ClientOptions::mode or KILN_MODE. In auto mode the first request
// decides: a daemon is there when something accepts connections at the unix socket; a missing
// socket file or a refused connection means none, and the embedded engine serves. The decision
// is kept for the life of the settings (kiln::Configure makes new ones), so one process never
// mixes the two behind a caller's back. A TCP target is always the daemon.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "client/core/rpc/daemon_connection.h"
#include "kiln/client.h"
#include "kiln/status.h"

namespace kiln::client {

// A value of KILN_MODE (or of `source`, kiln_set_mode's argument): null and "" are auto.
// Anything else but "auto", "daemon" and "embedded" gives an INVALID_ARGUMENT naming the source,
// the value and the choices.
StatusOr<ClientMode> ParseClientMode(const char* value, const char* source = "KILN_MODE");

// Whether a daemon listens at `socket`: false only when nothing is there (no such file, or
// nothing accepts: ECONNREFUSED); `*why` says what was found.
bool DaemonListensAt(const std::string& socket, std::string* why);

class KernelSource {
 public:
  KernelSource(ClientMode requested, std::shared_ptr<const DaemonConnection> connection);

  // Whether requests go to the embedded engine (deciding now if not yet). An error for an
  // invalid KILN_MODE, or for embedded mode in a library built without the engine.
  StatusOr<bool> UseEmbedded() const;
  // For people: the mode, why, and where kernels come from (kiln::DescribeMode).
  std::string Describe() const;

 private:
  void Decide() const;

  ClientMode requested_;
  std::shared_ptr<const DaemonConnection> connection_;
  mutable std::once_flag decided_;
  mutable Status error_;
  mutable bool embedded_ = false;
  mutable std::string why_;
};

}  // namespace kiln::client
