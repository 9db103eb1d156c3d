#include "server/daemon/local_fetch_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/arena.h>
#include <spdlog/spdlog.h>

#include "proto/local_fetch.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/kernel_wire.h"

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;
// How long a reply may take to leave: a client that stops reading does not hold a thread.
constexpr auto kSendTimeout = std::chrono::seconds(30);

void SendFrame(int fd, uint32_t code, const std::string& body) {
  char header[8];
  proto::PutU32(header, code);
  proto::PutU32(header + 4, static_cast<uint32_t>(body.size()));
  (void)proto::WriteAll(fd, std::string_view(header, 8), body, Clock::now() + kSendTimeout);
}

void SendError(int fd, const absl::Status& status) {
  grpc::Status cut = ToGrpc(status);  // the same bounded message gRPC callers get
  SendFrame(fd, static_cast<uint32_t>(cut.error_code()), cut.error_message());
}

// The reply GetKernel's gRPC path builds as one message (KernelServiceImpl::Serve), sent as the
// artifact's serialized fields (made once per artifact) followed by this serve's own: the client
// parses the two as one message (kernel_wire.h, ArtifactReplyFields).
void SendServed(int fd, const KernelServiceImpl::Resolved& resolved) {
  const Artifact& a = *resolved.served.artifact;
  v1::GetKernelResponse own;
  FillServedFields(resolved.served, &own);
  if (resolved.blob_path) own.set_blob_path(a.blob_path);
  const std::string& fields = ArtifactReplyFields(a);
  std::string body;
  body.reserve(fields.size() + own.ByteSizeLong() + (resolved.blob_path ? 0 : a.cubin->size() + 16));
  body.append(fields);
  own.AppendToString(&body);
  // The bytes, when the client cannot be given the blob path, last, in a message of their own.
  if (!resolved.blob_path) {
    v1::GetKernelResponse bytes;
    bytes.set_cubin(*a.cubin);
    bytes.AppendToString(&body);
  }
  SendFrame(fd, 0, body);
}

// The peer's pid, for job waiter lists ("local fetch, pid 1234").
std::string PeerName(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
    return "local fetch, pid " + std::to_string(cred.pid);
  return "local fetch";
}

// Whether the client hung up while its request waits (a compile): the engine then stops
// waiting for it, as for a cancelled gRPC call.
bool HungUp(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace

LocalFetchServer::LocalFetchServer(KernelServiceImpl* service, RpcLatency* latency, size_t max_connections)
    : service_(service), latency_(latency), max_connections_(max_connections) {}

LocalFetchServer::~LocalFetchServer() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
  done_.wait(lock, [this] { return open_.empty(); });
}

void LocalFetchServer::Serve(int fd) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ && open_.size() < max_connections_) {
      open_.insert(fd);
      std::thread([this, fd] { Run(fd); }).detach();
      return;
    }
    ++refused_;
  }
  SendError(fd, absl::ResourceExhaustedError("kilnd serves at most " + std::to_string(max_connections_) +
                                             " same-node fetch connections; use gRPC on this socket"));
  ::close(fd);
}

void LocalFetchServer::Run(int fd) {
  const std::string peer = PeerName(fd);
  char header[4];
  // Kept across the connection's requests: the body's buffer, and an arena whose first block
  // holds each request's message (a 40-entry source is ~45 allocations and frees a request on
  // the heap; protobuf deletes a oneof's message on every Clear, so reusing one message does
  // not keep them). Each request's message is made anew in the arena, so nothing of the one
  // before survives; a request too large for the block takes heap blocks, freed by the next
  // Reset. The body's buffer is released after a request above kKeepRequestBytes.
  constexpr size_t kKeepRequestBytes = 256 * 1024;
  std::string body;
  std::vector<char> first_block(64 * 1024);
  google::protobuf::ArenaOptions arena_options;
  arena_options.initial_block = first_block.data();
  arena_options.initial_block_size = first_block.size();
  google::protobuf::Arena arena(arena_options);
  while (true) {
    proto::Io io = proto::ReadExact(fd, header, 4, Clock::time_point::max(), kNextRequestSpin);
    if (!io.ok()) break;  // closed (the usual end), or shut down
    const uint32_t length = proto::GetU32(header);
    if (length > proto::kMaxLocalRequestBytes) {
      SendError(fd, absl::InvalidArgumentError("a same-node fetch request of " + std::to_string(length) +
                                               " bytes is over the limit of " +
                                               std::to_string(proto::kMaxLocalRequestBytes)));
      break;
    }
    body.resize(length);
    // The body follows its header at once; a client that stalls mid-frame is dropped.
    if (!proto::ReadExact(fd, body.data(), length, Clock::now() + std::chrono::seconds(10)).ok()) break;
    const auto started = Clock::now();
    arena.Reset();
    v1::GetKernelRequest& request = *google::protobuf::Arena::CreateMessage<v1::GetKernelRequest>(&arena);
    absl::StatusOr<KernelServiceImpl::Resolved> resolved =
        request.ParseFromString(body)
            ? service_->Resolve(request, peer, /*local=*/true, Clock::time_point::max(), [fd] { return HungUp(fd); })
            : absl::InvalidArgumentError("the same-node fetch request is not a kiln.v1.GetKernelRequest");
    if (resolved.ok()) {
      SendServed(fd, *resolved);
    } else {
      SendError(fd, resolved.status());
    }
    if (latency_ != nullptr) latency_->Observe(kMethod, std::chrono::duration<double>(Clock::now() - started).count());
    if (length > kKeepRequestBytes) body = std::string();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ::close(fd);
  open_.erase(fd);
  done_.notify_all();
}

size_t LocalFetchServer::open_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.size();
}

size_t LocalFetchServer::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

}  // namespace kiln::server
