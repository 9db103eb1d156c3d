#include "client/core/rpc/local_fetch_client.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <grpcpp/support/status.h>

#include "client/core/rpc/kernel_rpc.h"
#include "proto/local_fetch.h"

namespace kiln::client {
namespace {

using Clock = std::chrono::steady_clock;

// A non-blocking connection to `path` that has sent the magic, or -1 with `why`.
int Connect(const std::string& path, std::string* why) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    *why = "the socket path is too long";
    return -1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  // Blocking for the connect (a unix socket connects at once or fails), then non-blocking.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    *why = "connect " + path + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  int one = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
    *why = std::string("fcntl: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  proto::Io io = proto::WriteAll(fd, proto::kLocalFetchMagic, {}, Clock::now() + std::chrono::seconds(5));
  if (!io.ok()) {
    *why = "sending the protocol's magic: " + io.error;
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

LocalFetchClient::~LocalFetchClient() {
  for (int fd : idle_) ::close(fd);
}

int LocalFetchClient::Take(bool* fresh, std::string* why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Clock::now() < unusable_until_) {
      *why = "the daemon did not speak the same-node protocol recently";
      return -1;
    }
    if (!idle_.empty()) {
      int fd = idle_.back();
      idle_.pop_back();
      *fresh = false;
      return fd;
    }
  }
  *fresh = true;
  return Connect(socket_, why);
}

void LocalFetchClient::Give(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kMaxIdle) {
    idle_.push_back(fd);
    return;
  }
  ::close(fd);
}

LocalFetchClient::Answer LocalFetchClient::Call(const DaemonConnection& connection, std::string_view body,
                                                const v1::GetKernelRequest& described,
                                                std::chrono::milliseconds timeout) {
  // Built only for an error: a warm fetch should not pay for the text.
  auto what = [&described] { return "GetKernel " + DescribeRequest(described); };
  Answer answer;
  if (body.size() > proto::kMaxLocalRequestBytes) {
    answer.why_not = "the request is over the protocol's size limit";
    return answer;
  }
  char header[8];
  proto::PutU32(header, static_cast<uint32_t>(body.size()));
  const auto deadline = Clock::now() + timeout;
  // An idle connection may have been closed by a daemon that restarted: then once more on a
  // fresh one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool fresh = false;
    int fd = Take(&fresh, &answer.why_not);
    if (fd < 0) return answer;
    proto::Io io = proto::WriteAll(fd, std::string_view(header, 4), body, deadline);
    if (io.ok()) io = proto::ReadExact(fd, header, 8, deadline, kReplySpin);
    if (io.outcome == proto::IoOutcome::kTimeout) {
      ::close(fd);  // the reply may still come: this connection's framing is lost
      answer.answered = true;
      answer.reply = connection.Explain(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                                     "no reply within " + std::to_string(timeout.count()) + " ms"),
                                        what());
      return answer;
    }
    if (!io.ok()) {
      ::close(fd);
      answer.why_not = io.error;
      if (!fresh) continue;
      // A new connection closed before any answer: a daemon without the protocol (gRPC
      // rejected the magic as a bad preface), or one that stopped. gRPC tells which.
      std::lock_guard<std::mutex> lock(mu_);
      unusable_until_ = Clock::now() + kRetryAfter;
      return answer;
    }
    const uint32_t code = proto::GetU32(header);
    const uint32_t length = proto::GetU32(header + 4);
    if (length > proto::kMaxLocalReplyBytes) {
      ::close(fd);
      answer.why_not = "a reply of " + std::to_string(length) + " bytes is over the protocol's limit";
      return answer;
    }
    std::string reply_bytes(length, '\0');
    io = proto::ReadExact(fd, reply_bytes.data(), length, deadline);
    if (!io.ok()) {
      ::close(fd);
      answer.why_not = "reading the reply: " + io.error;
      return answer;
    }
    Give(fd);
    answer.answered = true;
    if (code != 0) {
      answer.reply = connection.Explain(grpc::Status(static_cast<grpc::StatusCode>(code), reply_bytes), what());
      return answer;
    }
    v1::GetKernelResponse reply;
    if (!reply.ParseFromString(reply_bytes)) {
      answer.reply = Status(StatusCode::kInternal,
                            what() + ": the daemon's same-node reply is not a GetKernelResponse");
      return answer;
    }
    answer.reply = std::move(reply);
    return answer;
  }
  return answer;
}

}  // namespace kiln::client
