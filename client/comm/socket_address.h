// SocketAddress: where a rendezvous meets — a unix socket file ("/tmp/x.sock") or a name in
// Linux's abstract namespace ("@name") — and the listen/connect calls on it.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <string>

#include "client/comm/unique_fd.h"
#include "kiln/status.h"

namespace kiln::client::comm {

struct SocketAddress {
  std::string text;  // as given: "/tmp/x.sock" or "@name"
  bool abstract = false;
  sockaddr_un addr{};
  socklen_t length = 0;
};

// INVALID_ARGUMENT for an empty address, a path or name longer than sun_path holds, or a
// name with a NUL byte.
StatusOr<SocketAddress> ParseSocketAddress(const std::string& text);

// A non-blocking, close-on-exec listening socket. A socket file is made mode 0600; a stale
// one (nothing listening) is replaced, a live one is refused: another rank 0 owns it.
StatusOr<UniqueFd> ListenAt(const SocketAddress& address, int backlog);

// One non-blocking connect attempt. Returns the connected socket, or an invalid fd with
// *error set to errno: ENOENT / ECONNREFUSED / EAGAIN mean "nobody listening yet, retry".
UniqueFd TryConnect(const SocketAddress& address, int* error);

}  // namespace kiln::client::comm
