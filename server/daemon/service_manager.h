// What kilnd exchanges with its service manager (systemd, through libsystemd): the listening
// unix socket systemd may pass (socket activation, deploy/kilnd.socket) and the notices a
// Type=notify unit waits for. Without systemd (no LISTEN_FDS, no NOTIFY_SOCKET) kilnd binds
// its socket itself and every notice is a no-op.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::server {

// A listening socket inherited from systemd: descriptor 3 and the path it is bound to.
struct InheritedSocket {
  int fd = -1;
  std::string path;
};

// nullopt when systemd passed nothing (LISTEN_FDS unset, or LISTEN_PID not ours). An error,
// naming what was found, when it passed anything but exactly one listening unix stream socket
// bound to a path (a datagram socket, a TCP port, a regular file, several sockets). Unsets
// LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES, so nothing kilnd starts inherits them.
absl::StatusOr<std::optional<InheritedSocket>> TakeInheritedSocket();

// sd_notify: READY=1 once kilnd serves, STOPPING=1 when it begins to stop, STATUS=<text> for
// `systemctl status`. Failures are logged, never fatal: the notices are for the manager only.
void NotifyReady(const std::string& status);
void NotifyStopping(const std::string& status);

}  // namespace kiln::server
