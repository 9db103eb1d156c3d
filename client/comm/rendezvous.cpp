// Rendezvous after Join: the collectives, the reader thread that sees every byte and every
// lost peer, and the clean leave.
#include "client/comm/rendezvous.h"
#include "client/core/api/invalid_argument.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kiln::client::comm {
namespace {

constexpr auto kShortSend = std::chrono::seconds(1);  // leave, lost and error notices
constexpr int kFramesPerWakeup = 64;                  // fairness between busy peers

}  // namespace

Rendezvous::~Rendezvous() {
  Close();
  if (reader_.joinable()) reader_.join();  // Close() ran on the reader thread itself
  peers_.clear();
}

const char* Rendezvous::KindName(Kind kind) { return kind == Kind::kAllGather ? "AllGather" : "Barrier"; }

StatusOr<std::vector<PeerContribution>> Rendezvous::AllGather(std::string_view payload, const std::vector<int>& fds,
                                                              std::chrono::milliseconds timeout) {
  // Our own entry first: a failed dup() then fails only this rank, before anything is sent.
  std::vector<UniqueFd> own;
  for (size_t i = 0; i < fds.size() && fds.size() <= kMaxFrameFds; ++i) {
    int copy = ::fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
    if (copy < 0)
      return Status(errno == EBADF ? StatusCode::kInvalidArgument : StatusCode::kResourceExhausted,
                    Where() + "AllGather: fds[" + std::to_string(i) + "] = " + std::to_string(fds[i]) + ": " +
                        std::strerror(errno));
    own.emplace_back(copy);
  }
  std::vector<Frame> received;
  KILN_RETURN_IF_ERROR(RunCollective(Kind::kAllGather, payload, fds, timeout, &received));

  std::vector<PeerContribution> result(world_size_);
  std::vector<bool> filled(world_size_, false);
  result[rank_].rank = rank_;
  result[rank_].payload = std::string(payload);
  for (auto& fd : own) result[rank_].fds.push_back(fd.release());
  filled[rank_] = true;
  for (auto& f : received) {
    const int r = static_cast<int>(f.rank);
    if (r < 0 || r >= world_size_ || filled[r]) continue;  // cannot happen: rank 0 relays each once
    result[r].rank = r;
    result[r].payload = std::move(f.body);
    for (auto& fd : f.fds) result[r].fds.push_back(fd.release());
    filled[r] = true;
  }
  if (std::count(filled.begin(), filled.end(), true) != world_size_) {
    for (auto& c : result)
      for (int fd : c.fds) ::close(fd);
    return Fail(Status(StatusCode::kInternal, Where() + "AllGather: a rank's contribution is missing"));
  }
  return result;
}

Status Rendezvous::Barrier(std::chrono::milliseconds timeout) {
  std::vector<Frame> received;
  return RunCollective(Kind::kBarrier, {}, {}, timeout, &received);
}

Status Rendezvous::RunCollective(Kind kind, std::string_view payload, const std::vector<int>& fds,
                                 std::chrono::milliseconds timeout, std::vector<Frame>* received) {
  const std::string what = Where() + KindName(kind) + ": ";
  if (payload.size() > kMaxFramePayload)
    return InvalidArgument(what + "a payload of " + std::to_string(payload.size()) + " bytes exceeds the limit of " +
                           std::to_string(kMaxFramePayload) + " bytes");
  if (fds.size() > kMaxFrameFds)
    return InvalidArgument(what + std::to_string(fds.size()) + " fds exceed the limit of " +
                           std::to_string(kMaxFrameFds) + " per rank");
  for (size_t i = 0; i < fds.size(); ++i)
    if (::fcntl(fds[i], F_GETFD) < 0)
      return InvalidArgument(what + "fds[" + std::to_string(i) + "] = " + std::to_string(fds[i]) +
                             " is not an open file descriptor");

  std::lock_guard serial(collective_mu_);
  {
    std::lock_guard lock(mu_);
    if (failure_) return *failure_;
    if (closing_) return ClosedStatus();
  }
  const uint64_t seq = next_seq_++;
  if (world_size_ == 1) return OkStatus();
  const auto deadline = Clock::now() + timeout;
  return rank_ == 0 ? GatherAndRelay(kind, seq, payload, fds, deadline, timeout, received)
                    : SendAndWait(kind, seq, payload, fds, deadline, timeout, received);
}

Status Rendezvous::GatherAndRelay(Kind kind, uint64_t seq, std::string_view payload, const std::vector<int>& fds,
                                  Clock::time_point deadline, std::chrono::milliseconds timeout,
                                  std::vector<Frame>* received) {
  const std::string name = std::string(KindName(kind)) + " #" + std::to_string(seq);
  std::vector<Frame> frames;
  {
    std::unique_lock lock(mu_);
    while (true) {
      auto it = inbox_.find(seq);
      if (it != inbox_.end() && static_cast<int>(it->second.size()) == world_size_ - 1) {
        frames = std::move(it->second);
        inbox_.erase(it);
        break;
      }
      if (failure_) return *failure_;
      if (closing_) return ClosedStatus();
      std::vector<bool> arrived(world_size_, false);
      if (it != inbox_.end())
        for (const auto& f : it->second) arrived[f.rank] = true;
      std::string missing;
      for (int k = 1; k < world_size_; ++k) {
        if (arrived[k]) continue;
        if (peers_[k]->left) {
          Status s = FailLocked(Status(StatusCode::kFailedPrecondition,
                                       Where() + "rank " + std::to_string(k) + " left the rendezvous (Close) before " +
                                           name + "; the group cannot run collectives any more"));
          lock.unlock();
          BroadcastError(s);
          return s;
        }
        missing += (missing.empty() ? "" : ", ") + std::to_string(k);
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && Clock::now() >= deadline) {
        Status s = FailLocked(
            Status(StatusCode::kDeadlineExceeded,
                   Where() + name + " timed out after " + Seconds(timeout) + " waiting for rank " + missing));
        lock.unlock();
        BroadcastError(s);
        return s;
      }
    }
  }
  std::sort(frames.begin(), frames.end(), [](const Frame& a, const Frame& b) { return a.rank < b.rank; });
  for (size_t i = 0; i < frames.size(); ++i)
    if (frames[i].rank != i + 1)
      return Fail(Status(StatusCode::kInternal, Where() + name + ": rank " + std::to_string(frames[i].rank) +
                                                    " contributed twice (a bug in the rendezvous protocol)"));
  for (const auto& f : frames) {
    if (static_cast<Kind>(f.aux) == kind) continue;
    Status s = Fail(Status(StatusCode::kFailedPrecondition,
                           Where() + "collective #" + std::to_string(seq) + " does not match: rank 0 called " +
                               KindName(kind) + ", rank " + std::to_string(f.rank) + " called " +
                               KindName(static_cast<Kind>(f.aux)) +
                               " (every rank must call the collectives in the same order)"));
    BroadcastError(s);
    return s;
  }

  // A rank we cannot reach fails the collective for everyone still waiting on us.
  auto send_failed = [&](int to, int err) {
    Status s = SendFailed(to, err, deadline);
    BroadcastError(s);
    return s;
  };
  for (int to = 1; to < world_size_; ++to) {
    if (kind == Kind::kBarrier) {
      if (int err = Send(*peers_[to], FrameType::kDone, 0, 0, seq, {}, {}, deadline, true)) return send_failed(to, err);
      continue;
    }
    // Every rank but `to` itself, in rank order; rank 0's own contribution included.
    for (int from = 0; from < world_size_; ++from) {
      if (from == to) continue;
      int err;
      if (from == 0) {
        err = Send(*peers_[to], FrameType::kPart, 0, 0, seq, payload, fds, deadline, true);
      } else {
        const Frame& f = frames[from - 1];
        std::vector<int> raw;
        for (const auto& fd : f.fds) raw.push_back(fd.get());
        err = Send(*peers_[to], FrameType::kPart, from, 0, seq, f.body, raw, deadline, true);
      }
      if (err != 0) return send_failed(to, err);
    }
  }
  *received = std::move(frames);
  return OkStatus();
}

Status Rendezvous::SendAndWait(Kind kind, uint64_t seq, std::string_view payload, const std::vector<int>& fds,
                               Clock::time_point deadline, std::chrono::milliseconds timeout,
                               std::vector<Frame>* received) {
  const std::string name = std::string(KindName(kind)) + " #" + std::to_string(seq);
  if (int err = Send(*peers_[0], FrameType::kContrib, rank_, static_cast<uint32_t>(kind), seq, payload, fds, deadline,
                     true))
    return SendFailed(0, err, deadline);
  const size_t expected = kind == Kind::kBarrier ? 1 : world_size_ - 1;
  std::unique_lock lock(mu_);
  while (true) {
    auto it = inbox_.find(seq);
    if (it != inbox_.end() && it->second.size() == expected) {
      *received = std::move(it->second);
      inbox_.erase(it);
      return OkStatus();
    }
    if (failure_) return *failure_;
    if (closing_) return ClosedStatus();
    if (peers_[0]->left)
      return FailLocked(
          Status(StatusCode::kFailedPrecondition, Where() + "rank 0 left the rendezvous (Close) before " + name +
                                                      " completed; the group cannot run collectives any more"));
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && Clock::now() >= deadline)
      return FailLocked(Status(StatusCode::kDeadlineExceeded, Where() + name + " timed out after " + Seconds(timeout) +
                                                                  " on rank " + std::to_string(rank_) +
                                                                  " (rank 0 answers once every rank has called it)"));
  }
}

int Rendezvous::Send(Peer& peer, FrameType type, uint32_t rank, uint32_t aux, uint64_t seq, std::string_view body,
                     std::span<const int> fds, Clock::time_point deadline, bool abortable) {
  std::lock_guard lock(peer.send_mu);
  if (peer.torn || !peer.fd.valid()) return EPIPE;
  bool torn = false;
  int err = SendFrame(peer.fd.get(), type, rank, aux, seq, body, fds, deadline, abortable ? abort_fd_.get() : -1,
                      &torn);
  if (torn) peer.torn = true;
  return err;
}

Status Rendezvous::SendFailed(int to_rank, int error, Clock::time_point deadline) {
  if (error == ECANCELED) return ClosedStatus();
  const std::string to = "rank " + std::to_string(to_rank);
  if (error == ETIMEDOUT)
    return Fail(Status(StatusCode::kDeadlineExceeded, Where() + "timed out sending to " + to + " (is it stopped?)"));
  // A peer that died: its end of stream is what the reader classifies (lost or left).
  std::unique_lock lock(mu_);
  Peer& peer = *peers_[to_rank];
  cv_.wait_until(lock, std::min(deadline, Clock::now() + kShortSend),
                 [&] { return failure_.has_value() || closing_ || peer.gone; });
  if (failure_) return *failure_;
  if (closing_) return ClosedStatus();
  if (peer.left)
    return FailLocked(Status(StatusCode::kFailedPrecondition, Where() + to +
                                                                  " left the rendezvous (Close); the group cannot run "
                                                                  "collectives any more"));
  return FailLocked(
      Status(StatusCode::kUnavailable, Where() + "sending to " + to + " failed: " + std::strerror(error)));
}

void Rendezvous::BroadcastError(const Status& status) {
  if (rank_ != 0) return;
  for (int k = 1; k < world_size_; ++k) {
    {
      std::lock_guard lock(mu_);
      if (peers_[k]->left || peers_[k]->gone) continue;
    }
    Send(*peers_[k], FrameType::kError, 0, static_cast<uint32_t>(status.code()), 0, status.message(), {},
         Clock::now() + kShortSend, true);
  }
}

Status Rendezvous::Fail(Status status) {
  std::lock_guard lock(mu_);
  return FailLocked(std::move(status));
}

Status Rendezvous::FailLocked(Status status) {
  if (!failure_) failure_ = std::move(status);
  cv_.notify_all();
  return *failure_;
}

Status Rendezvous::ClosedStatus() const {
  return Status(StatusCode::kFailedPrecondition, Where() + "closed on rank " + std::to_string(rank_));
}

void Rendezvous::OnPeerLost(std::function<void(const std::string& why)> callback) {
  std::string why;
  {
    std::lock_guard lock(mu_);
    if (!lost_) {
      on_lost_ = std::move(callback);
      return;
    }
    why = *lost_;
  }
  if (callback) callback(why);
}

std::optional<std::string> Rendezvous::lost() const {
  std::lock_guard lock(mu_);
  return lost_;
}

void Rendezvous::ReaderLoop() {
  std::vector<Peer*> watched;
  std::vector<pollfd> fds;
  while (true) {
    watched.clear();
    fds.assign(1, pollfd{wake_fd_.get(), POLLIN, 0});
    {
      std::lock_guard lock(mu_);
      for (auto& peer : peers_) {
        if (!peer || peer->gone) continue;
        watched.push_back(peer.get());
        fds.push_back({peer->fd.get(), POLLIN, 0});
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;  // cannot happen with valid fds; Close() still works without the reader
    }
    if (fds[0].revents != 0) return;  // Close()
    for (size_t i = 0; i < watched.size(); ++i) {
      if (fds[i + 1].revents == 0) continue;
      Peer& peer = *watched[i];
      for (int n = 0; n < kFramesPerWakeup; ++n) {
        Frame frame;
        std::string error;
        auto result = peer.reader.Read(peer.fd.get(), &frame, &error);
        if (result == FrameReader::Result::kFrame) {
          OnFrame(peer, std::move(frame));
          continue;
        }
        if (result == FrameReader::Result::kClosed)
          OnPeerGone(peer, peer.reader.mid_frame() ? "connection closed in the middle of a message (process exited "
                                                     "or was killed)"
                                                   : "connection closed without leaving (process exited or was "
                                                     "killed)");
        if (result == FrameReader::Result::kError) OnPeerGone(peer, error);
        break;
      }
    }
  }
}

void Rendezvous::OnFrame(Peer& peer, Frame frame) {
  const bool from_root = peer.rank == 0;
  switch (frame.type) {
    case FrameType::kContrib:
      if (rank_ != 0) break;
      frame.rank = peer.rank;  // whatever it claims, it is the rank of this connection
      {
        std::lock_guard lock(mu_);
        inbox_[frame.seq].push_back(std::move(frame));
        cv_.notify_all();
      }
      return;
    case FrameType::kPart:
    case FrameType::kDone:
      if (!from_root) break;
      {
        std::lock_guard lock(mu_);
        inbox_[frame.seq].push_back(std::move(frame));
        cv_.notify_all();
      }
      return;
    case FrameType::kError:
      if (!from_root) break;
      Fail(Status(frame.aux == 0 ? StatusCode::kUnknown : static_cast<StatusCode>(frame.aux), frame.body));
      return;
    case FrameType::kLost:
      if (!from_root) break;
      RecordLoss(frame.body, static_cast<int>(frame.rank));
      return;
    case FrameType::kLeave: {
      std::lock_guard lock(mu_);
      peer.left = true;
      cv_.notify_all();
      return;
    }
    default: break;
  }
  OnPeerGone(peer, "sent an unexpected message (type " + std::to_string(static_cast<int>(frame.type)) + ")");
}

void Rendezvous::OnPeerGone(Peer& peer, const std::string& cause) {
  {
    std::lock_guard lock(mu_);
    peer.gone = true;
    cv_.notify_all();
    if (peer.left || closing_) return;
  }
  RecordLoss("rank " + std::to_string(peer.rank) + " lost: " + cause, peer.rank);
}

void Rendezvous::RecordLoss(const std::string& why, int lost_rank) {
  std::function<void(const std::string&)> callback;
  {
    std::lock_guard lock(mu_);
    if (closing_ || lost_) return;
    lost_ = why;
    FailLocked(Status(StatusCode::kUnavailable, why));
    callback = std::move(on_lost_);
    on_lost_ = nullptr;
  }
  // Rank 0 tells the others first: a slow callback must not delay them.
  if (rank_ == 0) {
    for (int k = 1; k < world_size_; ++k) {
      if (k == lost_rank) continue;
      {
        std::lock_guard lock(mu_);
        if (peers_[k]->left || peers_[k]->gone) continue;
      }
      Send(*peers_[k], FrameType::kLost, lost_rank, 0, 0, why, {}, Clock::now() + kShortSend, true);
    }
  }
  if (callback) callback(why);
}

void Rendezvous::Close() {
  std::lock_guard serial(close_mu_);
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    cv_.notify_all();
  }
  if (peers_.empty()) return;           // world size 1
  ::eventfd_write(abort_fd_.get(), 1);  // a collective's send on another thread gives up
  for (auto& peer : peers_) {
    if (!peer) continue;
    {
      std::lock_guard lock(mu_);
      if (peer->gone) continue;
    }
    Send(*peer, FrameType::kLeave, rank_, 0, 0, {}, {}, Clock::now() + kShortSend, false);
  }
  ::eventfd_write(wake_fd_.get(), 1);
  if (reader_.joinable() && reader_.get_id() == std::this_thread::get_id())
    return;  // called from the lost callback: the destructor joins and closes
  if (reader_.joinable()) reader_.join();
  // Shut down, not closed: a collective still returning on another thread may touch a peer;
  // the destructor closes the sockets.
  for (auto& peer : peers_)
    if (peer) ::shutdown(peer->fd.get(), SHUT_RDWR);
  std::lock_guard lock(mu_);
  inbox_.clear();
}

}  // namespace kiln::client::comm
