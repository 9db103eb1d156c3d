// Rendezvous::Join: rank 0 accepts world_size - 1 hellos and checks them; every other rank
// connects (retrying until rank 0 listens), says hello and waits for the group to complete.
#include "client/comm/rendezvous.h"
#include "client/core/api/invalid_argument.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace kiln::client::comm {
namespace {

int MillisUntil(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

// A rejection goes out with a short deadline of its own: the Join deadline may be over.
void SendReject(int sock, const std::string& why) {
  bool torn = false;
  SendFrame(sock, FrameType::kReject, 0, 0, 0, why, {}, Clock::now() + std::chrono::seconds(1), -1, &torn);
}

}  // namespace

Rendezvous::Rendezvous(SocketAddress address, int rank, int world_size)
    : address_(std::move(address)), rank_(rank), world_size_(world_size) {}

std::string Rendezvous::Seconds(std::chrono::milliseconds duration) {
  auto ms = duration.count();
  std::string text = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    char frac[8];
    std::snprintf(frac, sizeof(frac), ".%03lld", static_cast<long long>(ms % 1000));
    std::string f = frac;
    while (f.back() == '0') f.pop_back();
    text += f;
  }
  return text + " s";
}

StatusOr<std::unique_ptr<Rendezvous>> Rendezvous::Join(const std::string& address, int rank, int world_size,
                                                       std::chrono::milliseconds timeout) {
  const std::string where = "rendezvous '" + address + "': ";
  if (world_size < 1 || world_size > kMaxWorldSize)
    return InvalidArgument(where + "world size " + std::to_string(world_size) + " is out of range (1.." +
                           std::to_string(kMaxWorldSize) + ")");
  if (rank < 0 || rank >= world_size)
    return InvalidArgument(where + "rank " + std::to_string(rank) + " is out of range for world size " +
                           std::to_string(world_size) + " (0.." + std::to_string(world_size - 1) + ")");
  KILN_ASSIGN_OR_RETURN(auto parsed, ParseSocketAddress(address));
  const auto deadline = Clock::now() + timeout;
  std::unique_ptr<Rendezvous> r(new Rendezvous(std::move(parsed), rank, world_size));
  if (world_size == 1) return r;  // nobody to meet: no socket, no thread

  r->peers_.resize(world_size);
  Status status;
  if (rank == 0) {
    KILN_ASSIGN_OR_RETURN(auto listener, ListenAt(r->address_, world_size));
    status = r->AcceptAll(listener, deadline, timeout);
    // Everyone who will ever connect has (or the group failed): the name can go.
    if (!r->address_.abstract) ::unlink(r->address_.text.c_str());
  } else {
    status = r->ConnectToRoot(deadline, timeout);
  }
  if (status.ok()) status = r->StartReader();
  if (!status.ok()) {
    r->peers_.clear();
    return status;
  }
  return r;
}

Status Rendezvous::AcceptAll(const UniqueFd& listener, Clock::time_point deadline, std::chrono::milliseconds timeout) {
  struct Pending {
    UniqueFd fd;
    FrameReader reader;
  };
  std::vector<Pending> pending;
  int joined = 0;
  // Every process that took part learns why the group failed.
  auto fail_group = [&](StatusCode code, const std::string& why) {
    for (auto& p : pending) SendReject(p.fd.get(), why);
    for (auto& peer : peers_)
      if (peer) SendReject(peer->fd.get(), why);
    return Status(code, why);
  };

  while (joined < world_size_ - 1) {
    if (Clock::now() >= deadline) {
      std::string missing;
      for (int k = 1; k < world_size_; ++k)
        if (!peers_[k]) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
      return fail_group(StatusCode::kDeadlineExceeded, Where() + "only " + std::to_string(joined + 1) + " of " +
                                                           std::to_string(world_size_) + " ranks joined within " +
                                                           Seconds(timeout) + "; missing: rank " + missing);
    }
    std::vector<pollfd> fds{{listener.get(), POLLIN, 0}};
    for (auto& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), MillisUntil(deadline)) < 0 && errno != EINTR)
      return fail_group(StatusCode::kInternal, Where() + "poll failed: " + std::strerror(errno));

    for (size_t i = 0; i < pending.size(); ++i) {
      if (fds[i + 1].revents == 0) continue;
      Pending& p = pending[i];
      Frame hello;
      std::string error;
      auto result = p.reader.Read(p.fd.get(), &hello, &error);
      if (result == FrameReader::Result::kWouldBlock) continue;
      if (result != FrameReader::Result::kFrame || hello.type != FrameType::kHello) {
        p.fd.reset();  // not one of ours, or a rank that gave up: forget it
        continue;
      }
      const int r = static_cast<int>(hello.rank);
      const int size = static_cast<int>(hello.aux);
      if (size != world_size_)
        return fail_group(StatusCode::kFailedPrecondition, Where() + "rank 0 expects world size " +
                                                               std::to_string(world_size_) + ", rank " +
                                                               std::to_string(r) + " says " + std::to_string(size));
      if (r <= 0 || r >= world_size_ || peers_[r])
        return fail_group(StatusCode::kFailedPrecondition,
                          Where() + "rank " + std::to_string(r) +
                              " joined twice (two processes were given the same rank)");
      auto peer = std::make_unique<Peer>();
      peer->rank = r;
      peer->fd = std::move(p.fd);
      peers_[r] = std::move(peer);
      ++joined;
    }
    std::erase_if(pending, [](const Pending& p) { return !p.fd.valid(); });

    if (fds[0].revents & POLLIN) {
      while (true) {
        UniqueFd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!fd.valid()) break;
        ucred cred{};
        socklen_t len = sizeof(cred);
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::geteuid()) {
          SendReject(fd.get(), Where() + "rank 0 runs as uid " + std::to_string(::geteuid()) +
                                   " and accepts only processes of the same user; this one "
                                   "runs as uid " +
                                   std::to_string(cred.uid));
          continue;
        }
        pending.push_back(Pending{std::move(fd), FrameReader()});
      }
    }
  }

  const auto welcome_deadline = std::max(deadline, Clock::now() + std::chrono::seconds(1));
  for (int k = 1; k < world_size_; ++k) {
    bool torn = false;
    if (SendFrame(peers_[k]->fd.get(), FrameType::kWelcome, 0, 0, 0, {}, {}, welcome_deadline, -1, &torn) != 0)
      return fail_group(StatusCode::kUnavailable,
                        Where() + "rank " + std::to_string(k) + " went away before the group was complete");
  }
  return OkStatus();
}

Status Rendezvous::ConnectToRoot(Clock::time_point deadline, std::chrono::milliseconds timeout) {
  UniqueFd fd;
  auto backoff = std::chrono::milliseconds(2);
  while (true) {
    int error = 0;
    fd = TryConnect(address_, &error);
    if (fd.valid()) break;
    // Nothing there yet (ENOENT), nobody listening (ECONNREFUSED) or a full backlog (EAGAIN).
    if (error != ENOENT && error != ECONNREFUSED && error != EAGAIN)
      return Status(StatusCode::kUnavailable,
                    Where() + "rank " + std::to_string(rank_) + " cannot connect: " + std::strerror(error));
    if (Clock::now() >= deadline)
      return Status(StatusCode::kDeadlineExceeded,
                    "no rank 0 listening at '" + address_.text + "' after " + Seconds(timeout));
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
  }

  bool torn = false;
  if (int err = SendFrame(fd.get(), FrameType::kHello, rank_, world_size_, 0, {}, {}, deadline, -1, &torn); err != 0)
    return Status(StatusCode::kUnavailable,
                  Where() + "rank " + std::to_string(rank_) + " could not say hello to rank 0: " + std::strerror(err));
  FrameReader reader;
  while (true) {
    pollfd p{fd.get(), POLLIN, 0};
    int ready = ::poll(&p, 1, MillisUntil(deadline));
    if (ready < 0 && errno != EINTR)
      return Status(StatusCode::kInternal, Where() + "poll failed: " + std::strerror(errno));
    if (ready == 0 && Clock::now() >= deadline)
      return Status(StatusCode::kDeadlineExceeded, Where() + "rank " + std::to_string(rank_) +
                                                       " reached rank 0 but the group was not complete after " +
                                                       Seconds(timeout) + " (rank 0 is still waiting for other ranks)");
    Frame reply;
    std::string error;
    switch (reader.Read(fd.get(), &reply, &error)) {
      case FrameReader::Result::kWouldBlock: continue;
      case FrameReader::Result::kClosed:
        return Status(StatusCode::kUnavailable, Where() + "rank 0 closed the connection before the group was complete "
                                                          "(rank 0 failed or exited: see its output)");
      case FrameReader::Result::kError: return Status(StatusCode::kUnavailable, Where() + "from rank 0: " + error);
      case FrameReader::Result::kFrame:
        if (reply.type == FrameType::kReject) return Status(StatusCode::kFailedPrecondition, reply.body);
        if (reply.type != FrameType::kWelcome)
          return Status(StatusCode::kInternal, Where() + "unexpected message from rank 0 during "
                                                         "the handshake");
        peers_[0] = std::make_unique<Peer>();
        peers_[0]->rank = 0;
        peers_[0]->fd = std::move(fd);
        return OkStatus();
    }
  }
}

Status Rendezvous::StartReader() {
  wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  abort_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid() || !abort_fd_.valid())
    return Status(StatusCode::kInternal, Where() + "eventfd failed: " + std::strerror(errno));
  reader_ = std::thread([this] { ReaderLoop(); });
  return OkStatus();
}

}  // namespace kiln::client::comm
