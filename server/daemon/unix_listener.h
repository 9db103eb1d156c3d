// UnixListener: kilnd's own accept loop on its unix socket; each connection is handed to gRPC
// (grpc::AddInsecureChannelFromFd). gRPC 1.51's listener gives up for good on an accept4 error
// other than EAGAIN: at the open-file limit (EMFILE) it logged "Failed accept4: Too many open
// files" once and never accepted again, while the process looked healthy (issue 15). This
// loop keeps one descriptor in reserve; at the limit it spends it to accept and close the
// waiting connection (the client sees it closed and may retry, instead of hanging in the
// backlog), reports "not accepting" and tries again every poll until descriptors are free.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}

namespace kiln::server {

class UnixListener {
 public:
  // Binds and listens on `path` (removed first: SocketGuard has made sure it is stale).
  static absl::StatusOr<std::unique_ptr<UnixListener>> Listen(const std::string& path);
  // Accepts on a listening socket systemd passed (service_manager.h: already checked to be a
  // non-blocking listening unix stream socket bound to `path`). Takes ownership of `fd`.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Adopt(int fd, const std::string& path);
  ~UnixListener();  // stops accepting and closes the socket; served connections stay

  // Accepts until destroyed. `on_accepting` is told false when a connection had to be refused
  // for want of file descriptors, and true once descriptors are free again.
  void Start(grpc::Server* server, std::function<void(bool)> on_accepting);

  uint64_t refused() const { return refused_.load(); }  // connections closed at the limit

 private:
  UnixListener() = default;
  absl::Status PrepareLoop();  // the wake pipe and the reserve descriptor
  void Run();
  bool RefuseOne();  // at the limit: accept with the reserve descriptor and close

  std::string path_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe that ends the loop
  int reserve_fd_ = -1;     // /dev/null, given up at the limit to accept and close
  grpc::Server* server_ = nullptr;
  std::function<void(bool)> on_accepting_;
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace kiln::server
