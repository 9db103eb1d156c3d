// LocalFetchClient: the client's side of the same-node fetch (proto/local_fetch.h): GetKernel on
// kilnd's unix socket without gRPC. It keeps a few connections open for the next requests (a
// request that compiles holds its connection; another thread opens a second one). When the
// protocol cannot be used — nothing listens, the daemon predates it, too many connections —
// the caller asks over gRPC instead, which explains a missing daemon in full.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "client/core/rpc/daemon_connection.h"
#include "kiln/status.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::client {

class LocalFetchClient {
 public:
  explicit LocalFetchClient(std::string socket_path) : socket_(std::move(socket_path)) {}
  ~LocalFetchClient();
  LocalFetchClient(const LocalFetchClient&) = delete;
  LocalFetchClient& operator=(const LocalFetchClient&) = delete;

  struct Answer {
    bool answered = false;  // false: use gRPC (why_not says why)
    StatusOr<v1::GetKernelResponse> reply = Status(StatusCode::kUnknown, "not asked");
    std::string why_not;
  };
  // The daemon's answer to `body`, a serialized kiln.v1.GetKernelRequest (a reply, or its error as
  // `connection` explains errors), or answered = false when the same-node protocol could not
  // carry it. Errors are named "GetKernel <DescribeRequest(described)>", as CallGetKernel names
  // them; `described` is the request of `body` (less any per-call field the caller appended).
  Answer Call(const DaemonConnection& connection, std::string_view body, const v1::GetKernelRequest& described,
              std::chrono::milliseconds timeout);

  // Connections kept open between requests, at most.
  static constexpr size_t kMaxIdle = 4;
  // After a daemon closed a fresh connection without answering (it does not speak the
  // protocol), requests go straight to gRPC for this long.
  static constexpr std::chrono::seconds kRetryAfter{10};
  // How long the caller's thread polls for the reply before it sleeps: a warm answer comes back
  // within tens of microseconds, and a thread that slept must be woken (on the H200 host the two
  // wake-ups of a round trip were most of its 61 us). A miss that compiles costs this much CPU
  // once, on a thread that waits anyway.
  static constexpr std::chrono::microseconds kReplySpin{100};

 private:
  int Take(bool* fresh, std::string* why);
  void Give(int fd);

  const std::string socket_;
  std::mutex mu_;
  std::vector<int> idle_;
  std::chrono::steady_clock::time_point unusable_until_{};
};

}  // namespace kiln::client
