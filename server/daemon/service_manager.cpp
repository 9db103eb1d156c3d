#include "server/daemon/service_manager.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

// What descriptor `fd` is, for an error message that says what systemd passed instead.
std::string Describe(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return absl::StrCat("not usable (", std::strerror(errno), ")");
  if (S_ISREG(st.st_mode)) return "a regular file";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a pipe";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (!S_ISSOCK(st.st_mode)) return "not a socket";
  int domain = 0, type = 0, listening = 0;
  socklen_t len = sizeof(int);
  getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
  len = sizeof(int);
  getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len);
  len = sizeof(int);
  getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
  std::string family = domain == AF_UNIX    ? "unix"
                       : domain == AF_INET  ? "IPv4"
                       : domain == AF_INET6 ? "IPv6"
                                            : absl::StrCat("family ", domain);
  std::string kind = type == SOCK_STREAM      ? "stream"
                     : type == SOCK_DGRAM     ? "datagram"
                     : type == SOCK_SEQPACKET ? "seqpacket"
                                              : absl::StrCat("type ", type);
  return absl::StrCat("a ", family, " ", kind, " socket", listening ? "" : " that is not listening");
}

void Notify(const std::string& message) {
  int r = sd_notify(0, message.c_str());
  if (r < 0) spdlog::warn("sd_notify to systemd ({}): {}", message.substr(0, message.find('\n')), std::strerror(-r));
}

}  // namespace

absl::StatusOr<std::optional<InheritedSocket>> TakeInheritedSocket() {
  std::string listen_fds = std::getenv("LISTEN_FDS") != nullptr ? std::getenv("LISTEN_FDS") : "";
  // sd_listen_fds(1) unsets LISTEN_* and marks the descriptors close-on-exec.
  int n = sd_listen_fds(1);
  if (n < 0)
    return absl::InvalidArgumentError(absl::StrCat("LISTEN_FDS=\"", listen_fds, "\" from the service manager: ",
                                                   std::strerror(-n), " (a count of descriptors was expected)"));
  if (n == 0) return std::nullopt;
  const std::string where = absl::StrCat("socket activation (LISTEN_FDS=", n, ")");
  if (n != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": kilnd takes exactly one descriptor, its unix socket; give kilnd.socket one ListenStream=PATH"));
  const int fd = SD_LISTEN_FDS_START;
  int r = sd_is_socket_unix(fd, SOCK_STREAM, /*listening=*/1, nullptr, 0);
  if (r < 0) return absl::InvalidArgumentError(absl::StrCat(where, ": descriptor 3: ", std::strerror(-r)));
  if (r == 0)
    return absl::InvalidArgumentError(absl::StrCat(where, ": descriptor 3 is ", Describe(fd),
                                                   ", not a listening unix stream socket; kilnd.socket must say "
                                                   "ListenStream=/run/kiln/kilnd.sock (a path)"));
  sockaddr_un addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return absl::InvalidArgumentError(absl::StrCat(where, ": getsockname: ", std::strerror(errno)));
  size_t path_len = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
  // Clients and the single-daemon lock (socket_guard.h) need a file: no abstract or unbound socket.
  if (path_len == 0 || addr.sun_path[0] == '\0')
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": descriptor 3 is an abstract or unbound unix socket; kilnd.socket must listen on a path"));
  InheritedSocket socket{fd, std::string(addr.sun_path, strnlen(addr.sun_path, path_len))};
  // The accept loop drains the backlog until EAGAIN (unix_listener.cpp).
  if (int flags = fcntl(fd, F_GETFL); flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    return absl::InternalError(absl::StrCat(where, ": O_NONBLOCK on descriptor 3: ", std::strerror(errno)));
  return socket;
}

void NotifyReady(const std::string& status) { Notify(absl::StrCat("READY=1\nSTATUS=", status)); }
void NotifyStopping(const std::string& status) { Notify(absl::StrCat("STOPPING=1\nSTATUS=", status)); }

}  // namespace kiln::server
