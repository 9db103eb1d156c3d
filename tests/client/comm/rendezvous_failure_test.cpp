// Rendezvous when things go wrong between real processes: a rank killed with SIGKILL (every
// other rank hears of it, a waiting collective fails, nothing hangs), a clean Close (not a
// loss), collectives called out of order, and a rank that does not come to a collective.
#include <catch2/catch.hpp>

#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "client/comm/rendezvous.h"
#include "tests/client/comm/rank_processes.h"

namespace {

using kiln::Status;
using kiln::StatusCode;
using kiln::client::comm::Rendezvous;
using kiln::comm::testing::Failures;
using kiln::comm::testing::RunRanks;
using kiln::comm::testing::UniqueAbstractAddress;
using namespace std::chrono_literals;

#define RANK_EXPECT(cond, what)                                               \
  do {                                                                        \
    if (!(cond)) return std::string(#cond) + " failed: " + std::string(what); \
  } while (0)

// What OnPeerLost saw, for a body to wait on.
struct LossLog {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> messages;
  std::thread::id thread;

  void Record(const std::string& why) {
    std::lock_guard lock(mu);
    messages.push_back(why);
    thread = std::this_thread::get_id();
    cv.notify_all();
  }
  bool WaitForOne(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, timeout, [&] { return !messages.empty(); });
  }
  size_t count() {
    std::lock_guard lock(mu);
    return messages.size();
  }
};

TEST_CASE("Rendezvous: a rank killed with SIGKILL is reported to every other rank", "[comm][rendezvous]") {
  const int world = 4;
  const int victim = GENERATE(1, 0, 3);
  const std::string address = UniqueAbstractAddress();
  const std::string expected = "rank " + std::to_string(victim) +
                               " lost: connection closed without leaving (process exited or was killed)";
  INFO("victim: rank " << victim);
  auto outcomes = RunRanks(world, [&](int rank) -> std::string {
    auto joined = Rendezvous::Join(address, rank, world, 20s);
    if (!joined.ok()) return "Join: " + joined.status().ToString();
    Rendezvous& rv = **joined;
    LossLog log;
    rv.OnPeerLost([&](const std::string& why) { log.Record(why); });
    Status s = rv.Barrier(20s);
    RANK_EXPECT(s.ok(), s.ToString());
    if (rank == victim) {
      std::this_thread::sleep_for(300ms);  // the others are waiting in AllGather by now
      ::raise(SIGKILL);
    }
    // In flight when the victim dies: fails with the loss, long before its own timeout.
    auto got = rv.AllGather("payload", {}, 30s);
    RANK_EXPECT(!got.ok(), "AllGather completed without the victim");
    RANK_EXPECT(got.status().code() == StatusCode::kUnavailable, got.status().ToString());
    RANK_EXPECT(got.status().message() == expected, got.status().ToString());

    RANK_EXPECT(log.WaitForOne(5s), "OnPeerLost did not fire");
    RANK_EXPECT(log.messages[0] == expected, log.messages[0]);
    RANK_EXPECT(log.thread != std::this_thread::get_id(), "fired on the background thread");
    RANK_EXPECT(rv.lost() == expected, rv.lost().value_or("<none>"));

    // Later collectives fail at once with the same message.
    s = rv.Barrier(30s);
    RANK_EXPECT(s.message() == expected, s.ToString());
    // A callback set after the loss runs right away, on the calling thread.
    std::thread::id late_thread;
    std::string late;
    rv.OnPeerLost([&](const std::string& why) {
      late = why;
      late_thread = std::this_thread::get_id();
    });
    RANK_EXPECT(late == expected, "late callback got '" + late + "'");
    RANK_EXPECT(late_thread == std::this_thread::get_id(), "late callback on the caller's thread");

    std::this_thread::sleep_for(200ms);
    RANK_EXPECT(log.count() == 1, "OnPeerLost fired " + std::to_string(log.count()) + " times");
    rv.Close();  // must not hang with a dead peer
    return "";
  });
  CHECK(outcomes[victim].exit_code == 128 + SIGKILL);
  CHECK(Failures(outcomes, {victim}) == "");
}

TEST_CASE("Rendezvous: the lost callback may Close() the rendezvous", "[comm][rendezvous]") {
  const std::string address = UniqueAbstractAddress();
  auto outcomes = RunRanks(2, [&](int rank) -> std::string {
    auto joined = Rendezvous::Join(address, rank, 2, 20s);
    if (!joined.ok()) return "Join: " + joined.status().ToString();
    Rendezvous& rv = **joined;
    LossLog log;
    rv.OnPeerLost([&](const std::string& why) {
      rv.Close();  // on the reader thread
      log.Record(why);
    });
    if (rank == 1) {
      std::this_thread::sleep_for(200ms);  // rank 0 has set its callback by now
      ::raise(SIGKILL);
    }
    RANK_EXPECT(log.WaitForOne(5s), "OnPeerLost did not fire");
    joined->reset();  // joins the reader thread that ran the callback
    return "";
  });
  CHECK(outcomes[1].exit_code == 128 + SIGKILL);
  CHECK(Failures(outcomes, {1}) == "");
}

TEST_CASE("Rendezvous: a clean Close is not a loss", "[comm][rendezvous]") {
  const int world = 3;
  const std::string address = UniqueAbstractAddress();
  auto outcomes = RunRanks(world, [&](int rank) -> std::string {
    auto joined = Rendezvous::Join(address, rank, world, 20s);
    if (!joined.ok()) return "Join: " + joined.status().ToString();
    Rendezvous& rv = **joined;
    LossLog log;
    rv.OnPeerLost([&](const std::string& why) { log.Record(why); });
    Status s = rv.Barrier(20s);
    RANK_EXPECT(s.ok(), s.ToString());
    if (rank == 2) {
      rv.Close();
      s = rv.Barrier(1s);
      RANK_EXPECT(s.code() == StatusCode::kFailedPrecondition, s.ToString());
      RANK_EXPECT(s.message().find("closed on rank 2") != std::string::npos, s.ToString());
      return "";  // the process exits: after a leave, that is no loss either
    }
    // The next collective cannot complete without rank 2, and says so.
    s = rv.Barrier(20s);
    RANK_EXPECT(s.code() == StatusCode::kFailedPrecondition, s.ToString());
    RANK_EXPECT(s.message() == "rendezvous '" + address +
                                   "': rank 2 left the rendezvous (Close) before Barrier #1; the "
                                   "group cannot run collectives any more",
                s.ToString());
    // Rank 0 leaves first; rank 1 watches it go.
    std::this_thread::sleep_for(rank == 0 ? 200ms : 500ms);
    RANK_EXPECT(!rv.lost().has_value(), *rv.lost());
    RANK_EXPECT(log.count() == 0, log.messages[0]);
    rv.Close();
    return "";
  });
  CHECK(Failures(outcomes) == "");
}

TEST_CASE("Rendezvous: collectives called out of order fail on every rank", "[comm][rendezvous]") {
  const int world = 3;
  const std::string address = UniqueAbstractAddress();
  auto outcomes = RunRanks(world, [&](int rank) -> std::string {
    auto joined = Rendezvous::Join(address, rank, world, 20s);
    if (!joined.ok()) return "Join: " + joined.status().ToString();
    Rendezvous& rv = **joined;
    Status s = rank == 1 ? rv.Barrier(20s) : rv.AllGather("x", {}, 20s).status();
    RANK_EXPECT(s.code() == StatusCode::kFailedPrecondition, s.ToString());
    RANK_EXPECT(s.message() == "rendezvous '" + address +
                                   "': collective #0 does not match: rank 0 called AllGather, rank 1 "
                                   "called Barrier (every rank must call the collectives in the same order)",
                s.ToString());
    // Sticky: the group is out of step.
    RANK_EXPECT(rv.Barrier(20s).message() == s.message(), "later collectives fail the same way");
    return "";
  });
  CHECK(Failures(outcomes) == "");
}

TEST_CASE("Rendezvous: a collective times out waiting for a rank, and that rank learns why", "[comm][rendezvous]") {
  const std::string address = UniqueAbstractAddress();
  const std::string expected = "rendezvous '" + address + "': AllGather #0 timed out after 0.2 s waiting for rank 1";
  auto outcomes = RunRanks(2, [&](int rank) -> std::string {
    auto joined = Rendezvous::Join(address, rank, 2, 20s);
    if (!joined.ok()) return "Join: " + joined.status().ToString();
    Rendezvous& rv = **joined;
    if (rank == 0) {
      auto got = rv.AllGather("x", {}, 200ms);
      RANK_EXPECT(got.status().code() == StatusCode::kDeadlineExceeded, got.status().ToString());
      RANK_EXPECT(got.status().message() == expected, got.status().ToString());
      std::this_thread::sleep_for(1s);  // stay until rank 1 has looked
      return "";
    }
    std::this_thread::sleep_for(600ms);  // late: rank 0 has given up and told us
    Status s = rv.AllGather("x", {}, 20s).status();
    RANK_EXPECT(s.code() == StatusCode::kDeadlineExceeded, s.ToString());
    RANK_EXPECT(s.message() == expected, s.ToString());
    RANK_EXPECT(!rv.lost().has_value(), "a timeout is not a loss");
    return "";
  });
  CHECK(Failures(outcomes) == "");
}

}  // namespace
