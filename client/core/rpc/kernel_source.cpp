#include "client/core/rpc/kernel_source.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "client/core/api/invalid_argument.h"
#include "client/core/rpc/embedded_fetch.h"

namespace kiln::client {

StatusOr<ClientMode> ParseClientMode(const char* value, const char* source) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return ClientMode::kAuto;
  if (v == "daemon") return ClientMode::kDaemon;
  if (v == "embedded") return ClientMode::kEmbedded;
  return InvalidArgument(std::string(source) + "=\"" + v + "\" is not one of auto, daemon, embedded");
}

bool DaemonListensAt(const std::string& socket_path, std::string* why) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(address.sun_path)) {
    *why = "the socket path " + socket_path + " is too long to connect to";
    return true;  // the daemon's error then says so
  }
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::string("no socket to probe with: ") + std::strerror(errno);
    return true;
  }
  int rc;
  do rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  while (rc != 0 && errno == EINTR);
  const int error = rc == 0 ? 0 : errno;
  ::close(fd);
  if (rc == 0) {
    *why = "a daemon listens at " + socket_path;
    return true;
  }
  if (error == ENOENT || error == ECONNREFUSED || error == ENOTDIR) {
    *why = "no daemon at " + socket_path + " (" + std::strerror(error) + ")";
    return false;
  }
  // EACCES and the like: something is there that this process may not use. That is a setup to
  // fix (the socket's group), not a reason to compile behind the operator's back.
  *why = "the socket " + socket_path + " exists but cannot be used (" + std::strerror(error) + ")";
  return true;
}

KernelSource::KernelSource(ClientMode requested, std::shared_ptr<const DaemonConnection> connection)
    : requested_(requested), connection_(std::move(connection)) {}

void KernelSource::Decide() const {
  ClientMode mode = requested_;
  std::string from = "ClientOptions::mode";
  if (mode == ClientMode::kFromEnvironment) {
    const char* env = std::getenv("KILN_MODE");
    auto parsed = ParseClientMode(env);
    if (!parsed.ok()) {
      error_ = parsed.status();
      return;
    }
    mode = *parsed;
    from = env == nullptr || *env == '\0' ? "KILN_MODE unset" : "KILN_MODE=" + std::string(env);
  }
  switch (mode) {
    case ClientMode::kDaemon: why_ = from + ": the daemon only"; return;
    case ClientMode::kEmbedded:
      if (!EmbeddedEngineBuiltIn()) {
        error_ = Status(StatusCode::kFailedPrecondition,
                        from + " asks for the embedded engine, but this libkiln_client was built without it "
                               "(KILN_CLIENT_EMBEDDED=OFF); run kilnd and use the daemon");
        return;
      }
      embedded_ = true;
      why_ = from + ": the embedded engine only";
      return;
    default: break;
  }
  if (!connection_->is_local()) {
    why_ = from + ", auto: a TCP target is always the daemon";
    return;
  }
  std::string found;
  if (DaemonListensAt(connection_->socket_path(), &found)) {
    why_ = from + ", auto: " + found;
    return;
  }
  if (!EmbeddedEngineBuiltIn()) {
    why_ = from + ", auto: " + found + ", and this library has no embedded engine (KILN_CLIENT_EMBEDDED=OFF)";
    return;
  }
  embedded_ = true;
  why_ = from + ", auto: " + found;
}

StatusOr<bool> KernelSource::UseEmbedded() const {
  std::call_once(decided_, [this] { Decide(); });
  if (!error_.ok()) return error_;
  return embedded_;
}

std::string KernelSource::Describe() const {
  auto embedded = UseEmbedded();
  if (!embedded.ok()) return "no mode: " + embedded.status().message();
  if (*embedded) {
    auto summary = EmbeddedEngineSummary();
    return "embedded: compiling in this process, " + (summary.ok() ? *summary : summary.status().message()) + " (" +
           why_ + ")";
  }
  return "daemon at " + connection_->target() + " (" + why_ + ")";
}

}  // namespace kiln::client
