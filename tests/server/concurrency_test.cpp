// Single flight and shared caches: identical concurrent requests compile once, in one daemon
// and across daemons sharing a cache folder; a daemon killed with -9 mid-compile leaves a
// cache that verifies clean and serves intact entries.
#include <catch2/catch.hpp>

#include <signal.h>

#include <future>
#include <thread>

#include "cache/sha256.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;

namespace {
const std::map<std::string, std::string> kBf16_4096 = {{"dtype", "bf16"}, {"hidden", "4096"}};

std::vector<Reply> Concurrently(Rpc& rpc, const v1::GetKernelRequest& request, int n) {
  std::vector<std::future<Reply>> futures;
  for (int i = 0; i < n; ++i) futures.push_back(std::async(std::launch::async, [&] { return Get(rpc, request); }));
  std::vector<Reply> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}
}  // namespace

TEST_CASE("32 concurrent identical requests are answered by one compile", "[concurrency]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto replies = Concurrently(rpc, OpRequest("rmsnorm", kBf16_4096), 32);
  std::set<std::string> keys, shas;
  int compiled = 0;
  for (const auto& r : replies) {
    REQUIRE(r.status.ok());
    keys.insert(r.response.cache_key());
    shas.insert(kiln::cache::Sha256Hex(r.response.cubin()));
    compiled += r.response.origin() == v1::ORIGIN_COMPILED;
  }
  CHECK(keys.size() == 1);
  CHECK(shas.size() == 1);
  CHECK(compiled >= 1);  // the ones that joined the job; later arrivals hit memory
  CHECK(Stats(rpc).compiles() == 1);
  auto jobs = Jobs(rpc);
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].state() == v1::JOB_STATE_SUCCEEDED);
  CHECK(jobs[0].waiters_size() == compiled);
}

TEST_CASE("two daemons sharing a cache folder compile a key once between them", "[concurrency]") {
  TempDir dir;
  std::string cache = dir / "shared-cache";
  DaemonProcess a({.root = dir / "a", .cache_dir = cache});
  DaemonProcess b({.root = dir / "b", .cache_dir = cache});
  Rpc ra(a.channel()), rb(b.channel());
  auto request = OpRequest("fused_add_rmsnorm", {{"dtype", "fp16"}, {"hidden", "8192"}});
  auto fa = std::async(std::launch::async, [&] { return Concurrently(ra, request, 16); });
  auto fb = std::async(std::launch::async, [&] { return Concurrently(rb, request, 16); });
  std::set<std::string> shas;
  auto replies_a = fa.get(), replies_b = fb.get();
  for (const auto* replies : {&replies_a, &replies_b}) {
    for (const auto& r : *replies) {
      REQUIRE(r.status.ok());
      shas.insert(r.response.sha256());
    }
  }
  CHECK(shas.size() == 1);
  CHECK(Stats(ra).compiles() + Stats(rb).compiles() == 1);
  CHECK(Stats(ra).entries() == 1);
  // The daemon that did not compile found the other's commit after taking the key's lock.
  auto loser_jobs = Stats(ra).compiles() == 1 ? Jobs(rb) : Jobs(ra);
  REQUIRE(loser_jobs.size() == 1);
  CHECK(loser_jobs[0].state() == v1::JOB_STATE_REUSED);
}

TEST_CASE("kill -9 in the middle of compiles and writes leaves a cache that verifies clean", "[concurrency]") {
  TempDir dir;
  std::vector<v1::GetKernelRequest> requests;
  for (int hidden = 1000; hidden < 1024; ++hidden)
    requests.push_back(OpRequest(hidden % 2 ? "rmsnorm" : "fused_add_rmsnorm",
                                 {{"dtype", "fp16"}, {"hidden", std::to_string(hidden)}}));
  {
    DaemonProcess d({.root = dir.path(), .extra_args = {"--max-jobs", "2"}});
    Rpc rpc(d.channel());
    std::vector<std::thread> clients;
    for (const auto& r : requests) clients.emplace_back([&rpc, r] { Get(rpc, r, 60); });
    // Let some commits land and others be mid-way, then pull the plug.
    for (int i = 0; i < 400 && Stats(rpc).compiles() < 4; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    d.Kill9();
    for (auto& t : clients) t.join();
  }
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto report = Verify(rpc);
  for (const auto& p : report.problems()) WARN(p.problem() << " -> " << p.action());
  CHECK(report.problems_size() == 0);
  uint64_t entries = Stats(rpc).entries();
  CHECK(entries >= 1);  // the commits that landed before the kill survived
  // Every request is answered with an intact cubin; the survivors come from disk.
  int from_disk = 0;
  for (const auto& r : requests) {
    auto reply = Get(rpc, r);
    REQUIRE(reply.status.ok());
    CHECK(kiln::cache::Sha256Hex(reply.response.cubin()) == reply.response.sha256());
    from_disk += reply.response.origin() == v1::ORIGIN_DISK;
  }
  CHECK(uint64_t(from_disk) == entries);
  CHECK(Verify(rpc).problems_size() == 0);
}
