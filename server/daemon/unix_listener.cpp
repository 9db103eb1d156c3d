#include "server/daemon/unix_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

// SOMAXCONN on most systems; connections beyond it wait in the client's connect.
constexpr int kBacklog = 4096;
// How often, while descriptors are exhausted, the loop checks whether some were freed.
constexpr int kRetryMs = 100;

int OpenReserve() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

}  // namespace

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Listen(const std::string& path) {
  std::unique_ptr<UnixListener> l(new UnixListener());
  l->path_ = path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path))
    return absl::InvalidArgumentError(absl::StrCat("unix socket path ", path, " is too long"));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  l->listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l->listen_fd_ < 0) return absl::InternalError(absl::StrCat("socket(AF_UNIX): ", std::strerror(errno)));
  ::unlink(path.c_str());
  if (::bind(l->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    return absl::UnavailableError(absl::StrCat("bind ", path, ": ", std::strerror(errno)));
  if (::listen(l->listen_fd_, kBacklog) != 0)
    return absl::UnavailableError(absl::StrCat("listen ", path, ": ", std::strerror(errno)));
  if (auto s = l->PrepareLoop(); !s.ok()) return s;
  return l;
}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Adopt(int fd, const std::string& path) {
  std::unique_ptr<UnixListener> l(new UnixListener());
  l->path_ = path;
  l->listen_fd_ = fd;  // closed with the listener; systemd keeps its own copy listening
  if (auto s = l->PrepareLoop(); !s.ok()) return s;
  return l;
}

absl::Status UnixListener::PrepareLoop() {
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  reserve_fd_ = OpenReserve();
  return absl::OkStatus();
}

UnixListener::~UnixListener() {
  if (thread_.joinable()) {
    char c = 0;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_[0], wake_[1], reserve_fd_})
    if (fd >= 0) ::close(fd);
}

void UnixListener::Start(grpc::Server* server, std::function<void(bool)> on_accepting) {
  server_ = server;
  on_accepting_ = std::move(on_accepting);
  thread_ = std::thread([this] { Run(); });
}

bool UnixListener::RefuseOne() {
  if (reserve_fd_ >= 0) {
    ::close(reserve_fd_);
    reserve_fd_ = -1;
  }
  int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  refused_.fetch_add(1);
  reserve_fd_ = OpenReserve();
  return true;
}

void UnixListener::Run() {
  bool accepting = true;
  auto set_accepting = [&](bool now) {
    if (now == accepting) return;
    accepting = now;
    if (now)
      spdlog::info("accepting connections on {} again ({} refused while the open-file limit was reached)", path_,
                   refused_.load());
    else
      spdlog::error("open-file limit reached: connections to {} are closed as they arrive until some close "
                    "(raise LimitNOFILE / ulimit -n, or find the client holding idle connections)",
                    path_);
    if (on_accepting_) on_accepting_(now);
  };
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    int n = ::poll(fds, 2, accepting ? -1 : kRetryMs);
    if (n < 0 && errno != EINTR) {
      spdlog::error("poll on {}: {}", path_, std::strerror(errno));
      ::usleep(kRetryMs * 1000);
      continue;
    }
    if (fds[1].revents != 0) return;
    if (!accepting && reserve_fd_ < 0) reserve_fd_ = OpenReserve();
    if (!accepting && reserve_fd_ >= 0) {
      // A descriptor could be opened: there is room again. Test it on the next connection.
      int probe = OpenReserve();
      if (probe >= 0) {
        ::close(probe);
        set_accepting(true);
      }
    }
    if (n <= 0 || (fds[0].revents & POLLIN) == 0) continue;
    // Drain what is waiting: gRPC reads the new connections on its own threads.
    while (true) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        // Health first: gRPC may serve the connection's first call before this thread goes on.
        set_accepting(true);
        grpc::AddInsecureChannelFromFd(server_, fd);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        set_accepting(false);
        if (!RefuseOne()) break;
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Never give up the socket: log and try again after a pause.
        spdlog::error("accept on {}: {}", path_, std::strerror(errno));
        ::usleep(kRetryMs * 1000);
      }
      break;
    }
  }
}

}  // namespace kiln::server
