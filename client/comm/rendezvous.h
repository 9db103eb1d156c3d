// Rendezvous: the processes of one job on one node (one rank per GPU) find each other over a
// unix socket, exchange bytes and file descriptors (e.g. GPU memory exported as POSIX fds),
// synchronize, and learn when one of them dies.
//
// How it works
// - A star through rank 0: rank 0 listens at the address and accepts world_size - 1
//   connections; every other rank connects to it (retrying until the Join timeout) and says
//   hello with its rank and world size. Join returns on every rank once all have joined; a
//   socket file is then unlinked. Rank 0 accepts only processes of its own uid (SO_PEERCRED).
// - Messages are length-prefixed frames (client/comm/frame.h); fds travel as SCM_RIGHTS.
// - Collectives are numbered per rank (#0, #1, ...): every rank must call them in the same
//   order. Each rank sends its contribution to rank 0; rank 0 waits for all, checks they are
//   the same collective, and relays (AllGather: every other rank's contribution; Barrier: a
//   "done"). One collective at a time per Rendezvous (concurrent calls are serialized).
// - Each Rendezvous with world_size > 1 has one background thread that does all socket reads.
//   It routes replies to the waiting collective and notices a peer that goes away: end of
//   stream or a reset without a "leave" message first (the process exited, crashed or was
//   killed -9). Rank 0 then tells every other rank "rank k lost: ..." at once.
// - Only a closed connection counts as lost: a peer that hangs but keeps its socket open is
//   caught by the collectives' timeouts, not here. A process that fork()s without exec keeps
//   the socket open in the child too, which hides its own death from the others.
//
// Failure is sticky: after a lost peer, a peer's clean leave, a timed-out collective or
// collectives called out of order, that collective and every later one fail with the same
// status (the group is out of step; tear it down).
//
// Limits: world_size 1..64; per AllGather and rank, a payload of at most 4 MiB and at most
// 16 fds (each rank ends up holding (world_size - 1) x fds received fds: mind ulimit -n).
//
// Not exported from libkiln_client (no KILN_API): the all-reduce built on it is.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/comm/frame.h"
#include "client/comm/socket_address.h"
#include "client/comm/unique_fd.h"
#include "kiln/status.h"

namespace kiln::client::comm {

inline constexpr int kMaxWorldSize = 64;

struct PeerContribution {
  int rank = 0;
  std::string payload;
  std::vector<int> fds;  // owned by the caller, who must close them
};

class Rendezvous {
 public:
  // `address`: a socket file path (rank 0 creates it mode 0600 and unlinks it once all ranks
  // have joined; a stale file from a dead run is replaced) or "@name" in the Linux abstract
  // namespace. 1 <= world_size <= 64, 0 <= rank < world_size. Ranks other than 0 retry
  // connecting until `timeout`; every rank returns once all world_size ranks have joined.
  // Errors: INVALID_ARGUMENT (bad address, rank, world size); FAILED_PRECONDITION (the ranks
  // disagree on the world size or a rank joined twice: every rank that took part fails at
  // once with the same message; or another rank 0 already listens there); DEADLINE_EXCEEDED
  // ("no rank 0 listening at '/tmp/x' after 30 s"; on rank 0, the ranks still missing).
  static StatusOr<std::unique_ptr<Rendezvous>> Join(const std::string& address, int rank, int world_size,
                                                    std::chrono::milliseconds timeout);
  ~Rendezvous();  // Close()
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& address() const { return address_.text; }

  // Collective: every rank contributes `payload` and `fds` (not taken: the caller still owns
  // and closes them). Returns world_size contributions indexed by rank; every fd in them is a
  // new descriptor (close-on-exec) the caller owns — its own entry holds dup()s of `fds`.
  // INVALID_ARGUMENT beyond the limits or for a closed fd (nothing is sent then).
  StatusOr<std::vector<PeerContribution>> AllGather(std::string_view payload, const std::vector<int>& fds,
                                                    std::chrono::milliseconds timeout);
  // Collective: returns once every rank has called it.
  Status Barrier(std::chrono::milliseconds timeout);

  // `callback` is called at most once, when a peer is lost while this Rendezvous is open,
  // with the same message lost() returns ("rank 1 lost: connection closed without leaving
  // (process exited or was killed)"). It runs on the background reader thread; when the loss
  // happened before the callback was set, it runs right away on the thread calling
  // OnPeerLost. It should return promptly (set a flag, wake a thread, abort the process); it
  // may call Close() but must not destroy this Rendezvous. A later call replaces a callback
  // not yet called.
  void OnPeerLost(std::function<void(const std::string& why)> callback);
  std::optional<std::string> lost() const;  // the first loss, if any

  // Clean leave: tells every connected peer "leave" (a leave is not a loss for them; their
  // later collectives fail with "rank k left the rendezvous"), stops and joins the reader
  // thread and shuts the sockets down (the destructor closes them). Never waits more than
  // about a second per stuck peer. Idempotent; a collective running on another thread fails
  // with "closed"; later collectives too.
  void Close();

 private:
  enum class Kind : uint32_t { kAllGather = 1, kBarrier = 2 };
  struct Peer {
    int rank = 0;
    UniqueFd fd;
    FrameReader reader;  // used by the reader thread only
    std::mutex send_mu;  // one frame at a time on this socket
    bool torn = false;   // guarded by send_mu: a send stopped mid-frame; nothing more goes out
    bool left = false;   // guarded by mu_: it said "leave"
    bool gone = false;   // guarded by mu_: its stream ended; the reader no longer watches it
  };

  Rendezvous(SocketAddress address, int rank, int world_size);
  static const char* KindName(Kind kind);
  static std::string Seconds(std::chrono::milliseconds duration);  // "30 s", "0.25 s"

  // Join's two sides: fill peers_ with connected sockets.
  Status AcceptAll(const UniqueFd& listener, Clock::time_point deadline, std::chrono::milliseconds timeout);
  Status ConnectToRoot(Clock::time_point deadline, std::chrono::milliseconds timeout);
  Status StartReader();

  // The collective behind both public calls; `received` gets the other ranks' frames.
  Status RunCollective(Kind kind, std::string_view payload, const std::vector<int>& fds,
                       std::chrono::milliseconds timeout, std::vector<Frame>* received);
  Status GatherAndRelay(Kind kind, uint64_t seq, std::string_view payload, const std::vector<int>& fds,
                        Clock::time_point deadline, std::chrono::milliseconds timeout, std::vector<Frame>* received);
  Status SendAndWait(Kind kind, uint64_t seq, std::string_view payload, const std::vector<int>& fds,
                     Clock::time_point deadline, std::chrono::milliseconds timeout, std::vector<Frame>* received);
  // Sends on one peer's socket under its send lock; abortable sends stop on Close().
  int Send(Peer& peer, FrameType type, uint32_t rank, uint32_t aux, uint64_t seq, std::string_view body,
           std::span<const int> fds, Clock::time_point deadline, bool abortable);
  Status SendFailed(int to_rank, int error, Clock::time_point deadline);
  void BroadcastError(const Status& status);  // rank 0: the group's collective failed
  Status Fail(Status status);                 // records a sticky failure, returns the first
  Status FailLocked(Status status);           // the same with mu_ held
  Status ClosedStatus() const;

  void ReaderLoop();
  void OnFrame(Peer& peer, Frame frame);
  void OnPeerGone(Peer& peer, const std::string& cause);
  void RecordLoss(const std::string& why, int lost_rank);

  std::string Where() const { return "rendezvous '" + address_.text + "': "; }

  const SocketAddress address_;
  const int rank_;
  const int world_size_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; rank 0 holds 1..n-1, others only [0]
  UniqueFd wake_fd_;                          // eventfd: wakes the reader to stop
  UniqueFd abort_fd_;                         // eventfd: written once on Close, stops abortable sends
  std::thread reader_;

  std::mutex collective_mu_;  // one collective at a time
  uint64_t next_seq_ = 0;     // guarded by collective_mu_

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_:
  std::map<uint64_t, std::vector<Frame>> inbox_;  // frames of collective #seq
  std::optional<Status> failure_;
  std::optional<std::string> lost_;
  std::function<void(const std::string&)> on_lost_;
  bool closing_ = false;

  std::mutex close_mu_;
  bool closed_ = false;  // guarded by close_mu_
};

}  // namespace kiln::client::comm
