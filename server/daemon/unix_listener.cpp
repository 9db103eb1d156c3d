#include "server/daemon/unix_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "proto/local_fetch.h"
#include "server/daemon/local_fetch_server.h"

namespace kiln::server {
namespace {

// SOMAXCONN on most systems; connections beyond it wait in the client's connect.
constexpr int kBacklog = 4096;
// How often, while descriptors are exhausted, the loop checks whether some were freed.
constexpr int kRetryMs = 100;
// Connections waiting to be sorted past this many go to gRPC unsorted, oldest first.
constexpr size_t kMaxUnsorted = 1024;

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
  for (const Unsorted& c : unsorted_) ::close(c.fd);
}

void UnixListener::Start(grpc::Server* server, LocalFetchServer* local_fetch, std::function<void(bool)> on_accepting) {
  server_ = server;
  local_fetch_ = local_fetch;
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

void UnixListener::ToGrpc(int fd) { grpc::AddInsecureChannelFromFd(server_, fd); }

void UnixListener::Take(int fd) {
  if (local_fetch_ == nullptr) return ToGrpc(fd);
  if (unsorted_.size() >= kMaxUnsorted) {
    ToGrpc(unsorted_.front().fd);
    unsorted_.erase(unsorted_.begin());
  }
  unsorted_.push_back({fd, std::chrono::steady_clock::now()});
}

bool UnixListener::Sort(Unsorted& c, bool timed_out) {
  const std::string_view magic = proto::kLocalFetchMagic;
  char first[8];
  static_assert(sizeof(first) == proto::kLocalFetchMagic.size());
  ssize_t n = ::recv(c.fd, first, sizeof(first), MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    if (!timed_out) return false;
    ToGrpc(c.fd);
    return true;
  }
  if (n <= 0) {  // closed before a word, or an error: nothing to serve
    ::close(c.fd);
    return true;
  }
  const std::string_view seen(first, static_cast<size_t>(n));
  if (seen != magic.substr(0, seen.size())) {
    ToGrpc(c.fd);  // HTTP/2's preface, or anything else: gRPC answers it
    return true;
  }
  if (seen.size() < magic.size() && !timed_out) {  // the rest of the magic is on its way
    c.partial = true;
    return false;
  }
  if (seen.size() < magic.size()) {
    ::close(c.fd);
    return true;
  }
  (void)!::recv(c.fd, first, sizeof(first), MSG_DONTWAIT);  // consume the magic peeked above
  local_fetch_->Serve(c.fd);
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
  std::vector<pollfd> fds;
  while (true) {
    fds.assign({{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}});
    // A partial one is watched for hang-ups only (events 0): see Unsorted::partial.
    for (const Unsorted& c : unsorted_) fds.push_back({c.fd, static_cast<short>(c.partial ? 0 : POLLIN), 0});
    int timeout = accepting ? -1 : kRetryMs;
    if (!unsorted_.empty()) {
      auto oldest_left = std::chrono::duration_cast<std::chrono::milliseconds>(
          unsorted_.front().accepted + std::chrono::milliseconds(kSortTimeoutMs) - std::chrono::steady_clock::now());
      int left = static_cast<int>(std::max<int64_t>(oldest_left.count() + 1, 0));
      timeout = timeout < 0 ? left : std::min(timeout, left);
    }
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      spdlog::error("poll on {}: {}", path_, std::strerror(errno));
      ::usleep(kRetryMs * 1000);
      continue;
    }
    if (fds[1].revents != 0) return;
    if (!unsorted_.empty()) {
      const auto now = std::chrono::steady_clock::now();
      std::vector<Unsorted> waiting;
      for (size_t i = 0; i < unsorted_.size(); ++i) {
        const short revents = n > 0 ? fds[2 + i].revents : 0;
        const bool timed_out = now - unsorted_[i].accepted >= std::chrono::milliseconds(kSortTimeoutMs);
        if (unsorted_[i].partial && (revents & (POLLHUP | POLLERR)) != 0) {
          ::close(unsorted_[i].fd);  // gone before finishing its magic
          continue;
        }
        if (!(revents != 0 || timed_out) || !Sort(unsorted_[i], timed_out)) waiting.push_back(unsorted_[i]);
      }
      unsorted_.swap(waiting);
    }
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
    // Drain what is waiting: gRPC reads the new connections on its own threads; the others wait
    // here (unsorted_) for their first bytes.
    while (true) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        // Health first: gRPC may serve the connection's first call before this thread goes on.
        set_accepting(true);
        Take(fd);
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
