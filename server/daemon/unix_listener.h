// UnixListener: kilnd's own accept loop on its unix socket; each connection is handed to gRPC
// (grpc::AddInsecureChannelFromFd). gRPC 1.51's listener gives up for good on an accept4 error
// other than EAGAIN: at the open-file limit (EMFILE) it logged "Failed accept4: Too many open
// files" once and never accepted again, while the process looked healthy (issue 15). This
// loop keeps one descriptor in reserve; at the limit it spends it to accept and close the
// waiting connection (the client sees it closed and may retry, instead of hanging in the
// backlog), reports "not accepting" and tries again every poll until descriptors are free.
//
// It also sorts connections by their first bytes: one that opens with the same-node fetch's
// magic (proto/local_fetch.h) goes to the LocalFetchServer, every other one to gRPC (whose
// clients open with HTTP/2's preface). The bytes are peeked, not read, for gRPC; a connection
// that says nothing for kSortTimeoutMs goes to gRPC, which has its own handshake timeouts.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}

namespace kiln::server {

class LocalFetchServer;

class UnixListener {
 public:
  // Binds and listens on `path` (removed first: SocketGuard has made sure it is stale).
  static absl::StatusOr<std::unique_ptr<UnixListener>> Listen(const std::string& path);
  // Accepts on a listening socket systemd passed (service_manager.h: already checked to be a
  // non-blocking listening unix stream socket bound to `path`). Takes ownership of `fd`.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Adopt(int fd, const std::string& path);
  ~UnixListener();  // stops accepting and closes the socket; served connections stay

  // Accepts until destroyed. `on_accepting` is told false when a connection had to be refused
  // for want of file descriptors, and true once descriptors are free again. `local_fetch` (may
  // be null: every connection is gRPC's) must outlive the listener.
  void Start(grpc::Server* server, LocalFetchServer* local_fetch, std::function<void(bool)> on_accepting);

  static constexpr int kSortTimeoutMs = 1000;

  uint64_t refused() const { return refused_.load(); }  // connections closed at the limit

 private:
  UnixListener() = default;
  absl::Status PrepareLoop();  // the wake pipe and the reserve descriptor
  void Run();
  bool RefuseOne();  // at the limit: accept with the reserve descriptor and close
  struct Unsorted {
    int fd;
    std::chrono::steady_clock::time_point accepted;
    // Part of the magic has arrived: its bytes stay unread, so poll would report the
    // connection readable at once, again and again; it waits for the sorting time instead.
    bool partial = false;
  };
  // A new connection: to gRPC at once without a LocalFetchServer, else to unsorted_.
  void Take(int fd);
  // Looks at what an unsorted connection has sent; true when it was handed on (or closed),
  // false when it waits on (c.partial set when part of the magic has arrived).
  bool Sort(Unsorted& c, bool timed_out);
  void ToGrpc(int fd);

  std::string path_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe that ends the loop
  int reserve_fd_ = -1;     // /dev/null, given up at the limit to accept and close
  grpc::Server* server_ = nullptr;
  LocalFetchServer* local_fetch_ = nullptr;
  std::vector<Unsorted> unsorted_;  // accepted, first bytes not seen yet (the loop's thread only)
  std::function<void(bool)> on_accepting_;
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace kiln::server
