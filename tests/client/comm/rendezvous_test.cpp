// Rendezvous between real processes: joining with 1, 2 and 4 ranks over a socket file and
// over the abstract namespace, AllGather of bytes and file descriptors (each rank reads every
// peer's memfd through the fd it received), Barrier, repeated collectives, limits, and the
// handshake's refusals.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "client/comm/rendezvous.h"
#include "tests/client/comm/rank_processes.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::Status;
using kiln::StatusCode;
using kiln::client::comm::kMaxFrameFds;
using kiln::client::comm::kMaxFramePayload;
using kiln::client::comm::PeerContribution;
using kiln::client::comm::Rendezvous;
using kiln::comm::testing::Failures;
using kiln::comm::testing::RunRanks;
using kiln::comm::testing::UniqueAbstractAddress;
using namespace std::chrono_literals;

#define RANK_EXPECT(cond, what)                                               \
  do {                                                                        \
    if (!(cond)) return std::string(#cond) + " failed: " + std::string(what); \
  } while (0)

int MemFdWith(const std::string& content) {
  int fd = ::memfd_create("kiln-rendezvous-test", MFD_CLOEXEC);
  if (fd >= 0 && ::write(fd, content.data(), content.size()) != ssize_t(content.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string ReadFd(int fd) {
  char buffer[256];
  ssize_t n = ::pread(fd, buffer, sizeof(buffer), 0);
  return n < 0 ? "<unreadable: " + std::string(std::strerror(errno)) + ">" : std::string(buffer, n);
}

// Round 3 sends the largest payload allowed; the others a short text.
std::string Payload(int rank, int round) {
  if (round == 3) return std::string(kMaxFramePayload, static_cast<char>('a' + rank));
  return "rank " + std::to_string(rank) + " round " + std::to_string(round);
}
std::string FdContent(int rank, int round, int j) {
  return "fd " + std::to_string(j) + " of rank " + std::to_string(rank) + " round " + std::to_string(round);
}
int FdCount(int round) { return round == 4 ? int(kMaxFrameFds) : round % 3; }

size_t OpenFdCount() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Ten rounds of AllGather (0 to 16 fds, up to 4 MiB) and Barrier on every rank.
std::string ExchangeRounds(const std::string& address, int rank, int world) {
  auto joined = Rendezvous::Join(address, rank, world, 20s);
  if (!joined.ok()) return "Join: " + joined.status().ToString();
  Rendezvous& rv = **joined;
  RANK_EXPECT(rv.rank() == rank && rv.world_size() == world, "rank/world_size");
  std::atomic<int> losses{0};
  rv.OnPeerLost([&](const std::string&) { ++losses; });
  if (rank == 0 && address[0] != '@')
    RANK_EXPECT(!std::filesystem::exists(address), "the socket file is removed once all joined");

  for (int round = 0; round < 10; ++round) {
    std::vector<int> mine;
    for (int j = 0; j < FdCount(round); ++j) mine.push_back(MemFdWith(FdContent(rank, round, j)));
    auto got = rv.AllGather(Payload(rank, round), mine, 20s);
    RANK_EXPECT(got.ok(), "AllGather round " + std::to_string(round) + ": " + got.status().ToString());
    RANK_EXPECT(int(got->size()) == world, "one contribution per rank");
    for (int k = 0; k < world; ++k) {
      PeerContribution& c = (*got)[k];
      RANK_EXPECT(c.rank == k, "indexed by rank");
      RANK_EXPECT(c.payload == Payload(k, round), "payload of rank " + std::to_string(k));
      RANK_EXPECT(int(c.fds.size()) == FdCount(round), "fd count of rank " + std::to_string(k));
      for (int j = 0; j < int(c.fds.size()); ++j) {
        RANK_EXPECT(ReadFd(c.fds[j]) == FdContent(k, round, j),
                    "rank " + std::to_string(k) + "'s fd " + std::to_string(j) + " reads '" + ReadFd(c.fds[j]) + "'");
        if (k == rank) RANK_EXPECT(c.fds[j] != mine[j], "own fds come back dup()ed");
        ::close(c.fds[j]);
      }
    }
    for (int fd : mine) ::close(fd);
    Status s = rv.Barrier(20s);
    RANK_EXPECT(s.ok(), "Barrier: " + s.ToString());
  }
  RANK_EXPECT(losses == 0, "OnPeerLost fired with every rank alive");
  RANK_EXPECT(!rv.lost().has_value(), "lost() without a loss");
  if (rank % 2 == 0) rv.Close();  // the others leave through the destructor
  return "";
}

// The exchange, then: every socket and every received fd is closed again.
std::string ExchangeAndCountFds(const std::string& address, int rank, int world) {
  const size_t before = OpenFdCount();
  std::string report = ExchangeRounds(address, rank, world);
  if (!report.empty()) return report;
  const size_t after = OpenFdCount();
  RANK_EXPECT(after == before, std::to_string(after - before) + " fds left open");
  return "";
}

TEST_CASE("Rendezvous: 1, 2 and 4 processes exchange payloads and fds, repeatedly", "[comm][rendezvous]") {
  const int world = GENERATE(1, 2, 4);
  const bool abstract = GENERATE(true, false);
  kiln::testing::TempDir dir("kiln-rv");
  const std::string address = abstract ? UniqueAbstractAddress() : dir / "rv.sock";
  INFO("world size " << world << ", address " << address);
  auto outcomes = RunRanks(world, [&](int rank) { return ExchangeAndCountFds(address, rank, world); });
  CHECK(Failures(outcomes) == "");
}

TEST_CASE("Rendezvous: a world of one gathers its own contribution", "[comm][rendezvous]") {
  auto joined = Rendezvous::Join(UniqueAbstractAddress(), 0, 1, 1s);
  REQUIRE(joined.ok());
  int fd = MemFdWith("alone");
  auto got = (*joined)->AllGather("me", {fd}, 1s);
  REQUIRE(got.ok());
  REQUIRE(got->size() == 1);
  CHECK((*got)[0].payload == "me");
  REQUIRE((*got)[0].fds.size() == 1);
  CHECK((*got)[0].fds[0] != fd);
  CHECK(ReadFd((*got)[0].fds[0]) == "alone");
  ::close((*got)[0].fds[0]);
  ::close(fd);
  CHECK((*joined)->Barrier(1s).ok());
}

TEST_CASE("Rendezvous: Join checks its arguments", "[comm][rendezvous]") {
  const std::string a = UniqueAbstractAddress();
  auto expect_invalid = [](const kiln::StatusOr<std::unique_ptr<Rendezvous>>& r, const std::string& text) {
    INFO(r.status().ToString());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message().find(text) != std::string::npos);
  };
  expect_invalid(Rendezvous::Join(a, 0, 0, 1s), "world size 0 is out of range (1..64)");
  expect_invalid(Rendezvous::Join(a, 0, 65, 1s), "world size 65 is out of range (1..64)");
  expect_invalid(Rendezvous::Join(a, 3, 3, 1s), "rank 3 is out of range for world size 3 (0..2)");
  expect_invalid(Rendezvous::Join(a, -1, 3, 1s), "rank -1 is out of range");
  expect_invalid(Rendezvous::Join("", 0, 2, 1s), "is empty");
  expect_invalid(Rendezvous::Join("@", 0, 2, 1s), "is empty");
  expect_invalid(Rendezvous::Join("@" + std::string(200, 'x'), 0, 2, 1s), "holds at most 107");
}

TEST_CASE("Rendezvous: AllGather refuses what is over its limits and sends nothing", "[comm][rendezvous]") {
  auto joined = Rendezvous::Join(UniqueAbstractAddress(), 0, 1, 1s);
  REQUIRE(joined.ok());
  Rendezvous& rv = **joined;
  auto too_big = rv.AllGather(std::string(kMaxFramePayload + 1, 'x'), {}, 1s);
  CHECK(too_big.status().code() == StatusCode::kInvalidArgument);
  CHECK(too_big.status().message().find("4194305 bytes exceeds the limit of 4194304") != std::string::npos);

  std::vector<int> many;
  for (size_t i = 0; i <= kMaxFrameFds; ++i) many.push_back(MemFdWith("x"));
  auto too_many = rv.AllGather("", many, 1s);
  CHECK(too_many.status().code() == StatusCode::kInvalidArgument);
  CHECK(too_many.status().message().find("17 fds exceed the limit of 16") != std::string::npos);
  for (int fd : many) ::close(fd);

  int closed = MemFdWith("x");
  ::close(closed);
  auto bad_fd = rv.AllGather("", {closed}, 1s);
  CHECK(bad_fd.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad_fd.status().message().find("fds[0] = " + std::to_string(closed)) != std::string::npos);

  auto fine = rv.AllGather("still fine", {}, 1s);  // a refused call changes nothing
  REQUIRE(fine.ok());
  CHECK((*fine)[0].payload == "still fine");
}

// Join on several threads of this process: the handshake does not care, and the test can
// compare every rank's status directly.
std::vector<Status> JoinOnThreads(const std::string& address, std::vector<std::pair<int, int>> ranks,
                                  std::chrono::milliseconds timeout) {
  std::vector<Status> statuses(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      if (ranks[i].first != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20 * i));
      auto r = Rendezvous::Join(address, ranks[i].first, ranks[i].second, timeout);
      statuses[i] = r.status();
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

TEST_CASE("Rendezvous: ranks that disagree on the world size are all refused, clearly", "[comm][rendezvous]") {
  const std::string address = UniqueAbstractAddress();
  auto statuses = JoinOnThreads(address, {{0, 4}, {1, 2}}, 20s);
  const std::string expected = "rendezvous '" + address + "': rank 0 expects world size 4, rank 1 says 2";
  for (const auto& s : statuses) {
    CHECK(s.code() == StatusCode::kFailedPrecondition);
    CHECK(s.message() == expected);
  }
}

TEST_CASE("Rendezvous: a rank that joins twice is refused", "[comm][rendezvous]") {
  const std::string address = UniqueAbstractAddress();
  auto statuses = JoinOnThreads(address, {{0, 3}, {1, 3}, {1, 3}}, 20s);
  for (const auto& s : statuses) {
    CHECK(s.code() == StatusCode::kFailedPrecondition);
    CHECK(s.message() == "rendezvous '" + address + "': rank 1 joined twice (two processes were given the same rank)");
  }
}

TEST_CASE("Rendezvous: without rank 0, Join times out naming the address", "[comm][rendezvous]") {
  kiln::testing::TempDir dir("kiln-rv");
  for (const std::string& address : {dir / "nobody.sock", UniqueAbstractAddress()}) {
    auto r = Rendezvous::Join(address, 1, 2, 200ms);
    CHECK(r.status().code() == StatusCode::kDeadlineExceeded);
    CHECK(r.status().message() == "no rank 0 listening at '" + address + "' after 0.2 s");
  }
}

TEST_CASE("Rendezvous: rank 0 alone times out naming the missing ranks", "[comm][rendezvous]") {
  kiln::testing::TempDir dir("kiln-rv");
  const std::string address = dir / "alone.sock";
  auto r = Rendezvous::Join(address, 0, 3, 200ms);
  CHECK(r.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(r.status().message() ==
        "rendezvous '" + address + "': only 1 of 3 ranks joined within 0.2 s; missing: rank 1, 2");
  CHECK(!std::filesystem::exists(address));
}

TEST_CASE("Rendezvous: a stale socket file is replaced, a live rank 0 is not", "[comm][rendezvous]") {
  kiln::testing::TempDir dir("kiln-rv");
  const std::string path = dir / "rv.sock";
  {  // what a killed rank 0 leaves behind: a socket file nobody listens on
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path.c_str());
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    ::close(fd);
  }
  std::optional<Status> first;
  std::thread rank0([&] { first = Rendezvous::Join(path, 0, 2, 20s).status(); });
  // Rank 0 listens once a plain connect gets through (a stranger that says nothing is dropped).
  bool listening = false;
  for (int i = 0; i < 5000 && !listening; ++i) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path.c_str());
    listening = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    if (!listening) std::this_thread::sleep_for(1ms);
  }
  REQUIRE(listening);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto second = Rendezvous::Join(path, 0, 2, 1s);
  CHECK(second.status().code() == StatusCode::kFailedPrecondition);
  CHECK(second.status().message() == "rendezvous '" + path +
                                         "': another rank 0 is already listening there (two "
                                         "launches sharing one address?)");
  auto rank1 = Rendezvous::Join(path, 1, 2, 20s);
  CHECK(rank1.ok());
  rank0.join();
  REQUIRE(first.has_value());
  CHECK(first->ok());
}

}  // namespace
