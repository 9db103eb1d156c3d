#include "client/comm/socket_address.h"

#include <poll.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "client/core/api/invalid_argument.h"

namespace kiln::client::comm {
namespace {

std::string Quoted(const std::string& text) { return "'" + text + "'"; }

}  // namespace

StatusOr<SocketAddress> ParseSocketAddress(const std::string& text) {
  SocketAddress a;
  a.text = text;
  a.abstract = !text.empty() && text[0] == '@';
  const std::string name = a.abstract ? text.substr(1) : text;
  if (name.empty())
    return InvalidArgument("rendezvous address " + Quoted(text) +
                           " is empty: give a socket path or @name (abstract namespace)");
  if (name.find('\0') != std::string::npos) return InvalidArgument("rendezvous address contains a NUL byte");
  // A path needs its terminating NUL inside sun_path; an abstract name starts after the
  // leading NUL and is not terminated.
  const size_t room = sizeof(a.addr.sun_path) - 1;
  if (name.size() > room)
    return InvalidArgument("rendezvous address " + Quoted(text) + " is " + std::to_string(name.size()) +
                           " bytes long; a unix socket address holds at most " + std::to_string(room));
  a.addr.sun_family = AF_UNIX;
  if (a.abstract) {
    a.addr.sun_path[0] = '\0';
    std::memcpy(a.addr.sun_path + 1, name.data(), name.size());
    a.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  } else {
    std::memcpy(a.addr.sun_path, name.data(), name.size());
    a.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size() + 1);
  }
  return a;
}

StatusOr<UniqueFd> ListenAt(const SocketAddress& address, int backlog) {
  const std::string where = "rendezvous " + Quoted(address.text) + ": ";
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Status(StatusCode::kInternal, where + "socket() failed: " + std::strerror(errno));
  const auto* sa = reinterpret_cast<const sockaddr*>(&address.addr);
  if (::bind(fd.get(), sa, address.length) != 0) {
    int err = errno;
    if (err == EADDRINUSE && !address.abstract) {
      // A socket file left behind by a process that died: nobody answers on it.
      int connect_error = 0;
      UniqueFd probe = TryConnect(address, &connect_error);
      if (!probe.valid() && connect_error == ECONNREFUSED && ::unlink(address.text.c_str()) == 0 &&
          ::bind(fd.get(), sa, address.length) == 0) {
        err = 0;
      }
    }
    if (err == EADDRINUSE)
      return Status(StatusCode::kFailedPrecondition,
                    where + "another rank 0 is already listening there (two launches sharing "
                            "one address?)");
    if (err != 0) return Status(StatusCode::kUnavailable, where + "rank 0 cannot listen there: " + std::strerror(err));
  }
  // bind() creates the file under the umask; only this user's processes may join.
  if (!address.abstract && ::chmod(address.text.c_str(), 0600) != 0) {
    int err = errno;
    ::unlink(address.text.c_str());
    return Status(StatusCode::kUnavailable, where + "cannot make the socket file mode 0600: " + std::strerror(err));
  }
  if (::listen(fd.get(), backlog) != 0) {
    int err = errno;
    if (!address.abstract) ::unlink(address.text.c_str());
    return Status(StatusCode::kUnavailable, where + "listen() failed: " + std::strerror(err));
  }
  return fd;
}

UniqueFd TryConnect(const SocketAddress& address, int* error) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    *error = errno;
    return fd;
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address.addr), address.length) == 0) {
    *error = 0;
    return fd;
  }
  *error = errno;
  if (*error == EINPROGRESS) {
    // Unix stream connects complete at once on Linux; wait briefly in case one does not.
    pollfd p{fd.get(), POLLOUT, 0};
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (::poll(&p, 1, 100) == 1 && ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 &&
        so_error == 0) {
      *error = 0;
      return fd;
    }
    *error = so_error != 0 ? so_error : EAGAIN;
  }
  return UniqueFd();
}

}  // namespace kiln::client::comm
