// The shared cluster cache on Redis (kilnd --remote-cache), against a real redis-server on
// loopback (tests/support/redis_server.h) and real daemons with their own cache folders: a
// fleet of three compiles each key once under 48 concurrent clients; a lease holder killed
// with -9 mid-compile is taken over once its lease expires; a damaged or foreign value is
// refused, deleted and replaced by a good one; Redis stopped and restarted mid-run fails no
// request, is logged once each way and is used again; a daemon whose Redis is not there at
// start serves all the same; offline, Redis is never asked.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "cache/sha256.h"
#include "kiln/v1/bundle.pb.h"
#include "server/tiers/remote_cache.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/redis_server.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;

namespace {

// A cheap spec (an rmsnorm compiles in about a second) per hidden size.
v1::GetKernelRequest Rmsnorm(int hidden) {
  return OpRequest("rmsnorm", {{"dtype", "bf16"}, {"hidden", std::to_string(hidden)}}, "sm_90a");
}

std::string ValueKey(const std::string& cache_key) { return "kiln:v1:cubin:" + cache_key; }

// How many times `text` occurs in `log`.
size_t Count(const std::string& log, const std::string& text) {
  size_t n = 0;
  for (size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
  return n;
}

// Polls `done` every 50 ms for up to `limit`; whether it became true.
template <typename F>
bool Eventually(F done, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// The value Redis holds for `cache_key`, parsed; nullopt when there is none.
std::optional<v1::RemoteCacheValue> ValueOf(RedisServer& redis, const std::string& cache_key) {
  auto bytes = redis.Get(ValueKey(cache_key));
  if (!bytes) return std::nullopt;
  v1::RemoteCacheValue value;
  if (!value.ParseFromString(*bytes)) return std::nullopt;
  return value;
}

bool IsGood(const v1::RemoteCacheValue& value, const std::string& cache_key) {
  return value.entry().cache_key() == cache_key && value.entry().size_bytes() == value.cubin().size() &&
         kiln::cache::Sha256Hex(value.cubin()) == value.entry().sha256();
}

DaemonOptions Member(const TempDir& dir, const std::string& name, const RedisServer& redis,
                     std::vector<std::string> more = {}) {
  DaemonOptions o{.root = dir / name, .extra_args = {"--remote-cache", redis.url(), "--max-jobs", "2"}};
  for (auto& a : more) o.extra_args.push_back(std::move(a));
  return o;
}

}  // namespace

TEST_CASE("a fleet of three daemons compiles each of 10 keys once for 48 concurrent clients", "[remote]") {
  TempDir dir;
  RedisServer redis;
  std::vector<std::unique_ptr<DaemonProcess>> fleet;
  for (const char* name : {"a", "b", "c"}) fleet.push_back(std::make_unique<DaemonProcess>(Member(dir, name, redis)));
  std::vector<int> hidden;
  for (int i = 0; i < 10; ++i) hidden.push_back(1024 + 128 * i);

  std::atomic<int> failed{0};
  std::mutex mu;
  std::map<std::string, int> origins;
  std::map<int, std::set<std::string>> shas;  // per hidden size: one cubin fleet-wide
  std::vector<std::thread> clients;
  for (int c = 0; c < 48; ++c) {
    clients.emplace_back([&, c] {
      Rpc rpc(fleet[c % 3]->channel());
      for (size_t i = 0; i < hidden.size(); ++i) {
        const int h = hidden[(c + i) % hidden.size()];  // clients start on different keys
        Reply r = Get(rpc, Rmsnorm(h));
        std::lock_guard<std::mutex> lock(mu);
        if (!r.status.ok()) {
          failed++;
          UNSCOPED_INFO("hidden " << h << ": " << r.status.error_message());
          continue;
        }
        origins[v1::Origin_Name(r.response.origin())]++;
        shas[h].insert(r.response.sha256());
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(failed == 0);

  uint64_t compiles = 0, published = 0, remote_hits = 0, waits = 0;
  for (auto& d : fleet) {
    Rpc rpc(d->channel());
    const v1::CacheStats s = Stats(rpc);
    INFO(d->Log());
    CHECK(s.compile_failures() == 0);
    CHECK(s.remote_rejected() == 0);
    CHECK_THAT(s.remote_cache(), Catch::EndsWith(": up"));
    compiles += s.compiles();
    published += s.remote_published();
    remote_hits += s.remote_hits();
    waits += s.remote_lease_waits();
  }
  for (const auto& [origin, n] : origins) UNSCOPED_INFO(origin << ": " << n);
  CHECK(compiles == 10);  // fleet-wide: each key once
  CHECK(published == 10);
  CHECK(remote_hits >= 20);  // the two daemons that did not compile a key got it from Redis
  INFO("lease waits " << waits);
  for (const auto& [h, set] : shas) CHECK(set.size() == 1);
  CHECK(redis.Keys("kiln:v1:cubin:*").size() == 10);
  CHECK(Eventually([&] { return redis.Keys("kiln:v1:lease:*").empty(); }, std::chrono::seconds(5)));
}

TEST_CASE("a lease holder killed mid-compile is taken over after its lease expires", "[remote]") {
  TempDir dir;
  RedisServer redis;
  // A short lease (renewed every second), yet long enough that the holder's lease is still
  // there when the other daemon asks, however loaded the machine.
  DaemonProcess holder(Member(dir, "holder", redis, {"--remote-cache-lease-ms", "3000"}));
  DaemonProcess other(Member(dir, "other", redis, {"--remote-cache-lease-ms", "3000"}));
  Rpc holder_rpc(holder.channel()), other_rpc(other.channel());

  auto doomed = std::async(std::launch::async, [&] { return Get(holder_rpc, Rmsnorm(3072), 60); });
  // The holder takes the lease just before NVRTC starts; kill it then, before it can publish.
  REQUIRE(Eventually([&] { return !redis.Keys("kiln:v1:lease:*").empty(); }));
  holder.Kill9();
  REQUIRE(doomed.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK_FALSE(doomed.get().status.ok());
  REQUIRE(redis.Keys("kiln:v1:cubin:*").empty());  // it died before publishing

  const auto t0 = std::chrono::steady_clock::now();
  Reply r = Get(other_rpc, Rmsnorm(3072), 60);
  const auto waited = std::chrono::steady_clock::now() - t0;
  INFO(other.Log());
  REQUIRE(r.status.ok());
  CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
  const v1::CacheStats s = Stats(other_rpc);
  CHECK(s.remote_lease_waits() == 1);
  CHECK(s.compiles() == 1);
  CHECK(waited < std::chrono::seconds(20));  // the lease's 3 s and a compile, not a hang
  CHECK_THAT(other.Log(), Catch::Contains("another daemon is compiling rmsnorm_bf16_h3072"));
  // The taker published, and its lease is gone.
  REQUIRE(Eventually([&] { return ValueOf(redis, r.response.cache_key()).has_value(); }, std::chrono::seconds(5)));
  CHECK(IsGood(*ValueOf(redis, r.response.cache_key()), r.response.cache_key()));
  CHECK(Eventually([&] { return redis.Keys("kiln:v1:lease:*").empty(); }, std::chrono::seconds(5)));
}

TEST_CASE("a damaged or foreign value in Redis is refused and deleted and a good one replaces it", "[remote]") {
  TempDir dir;
  RedisServer redis;
  std::string key_a, key_b;
  {
    DaemonProcess first(Member(dir, "first", redis));
    Rpc rpc(first.channel());
    Reply a = Get(rpc, Rmsnorm(1536)), b = Get(rpc, Rmsnorm(2560));
    REQUIRE(a.status.ok());
    REQUIRE(b.status.ok());
    key_a = a.response.cache_key();
    key_b = b.response.cache_key();
    REQUIRE(Eventually([&] { return Stats(rpc).remote_published() == 2; }, std::chrono::seconds(10)));
  }
  // A flipped byte in A's cubin (the cubin is the value's last field), and A's good value
  // stored under B's key (a foreign value).
  std::string good = *redis.Get(ValueKey(key_a));
  std::string damaged = good;
  damaged[damaged.size() - 64] = char(damaged[damaged.size() - 64] ^ 0x5a);
  redis.Set(ValueKey(key_a), damaged);
  redis.Set(ValueKey(key_b), good);

  DaemonProcess second(Member(dir, "second", redis));
  Rpc rpc(second.channel());
  for (int h : {1536, 2560}) {
    Reply r = Get(rpc, Rmsnorm(h));
    INFO(second.Log());
    REQUIRE(r.status.ok());
    CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
    CHECK(r.response.sha256() == kiln::cache::Sha256Hex(r.response.cubin()));
  }
  const v1::CacheStats s = Stats(rpc);
  CHECK(s.remote_rejected() == 2);
  CHECK(s.remote_hits() == 0);
  CHECK(s.compiles() == 2);
  const std::string log = second.Log();
  CHECK_THAT(log, Catch::Contains("SHA-256"));
  CHECK_THAT(log, Catch::Contains("its entry is of key " + key_a.substr(0, 16)));
  CHECK(Count(log, "not served, deleted") == 2);
  // Republished: good values under both keys, which a third daemon is served.
  for (const auto& key : {key_a, key_b})
    CHECK(Eventually(
        [&] {
          auto value = ValueOf(redis, key);
          return value && IsGood(*value, key);
        },
        std::chrono::seconds(10)));
  DaemonProcess third(Member(dir, "third", redis));
  Rpc third_rpc(third.channel());
  for (int h : {1536, 2560}) {
    Reply r = Get(third_rpc, Rmsnorm(h));
    REQUIRE(r.status.ok());
    CHECK(r.response.origin() == v1::ORIGIN_REMOTE);
    CHECK(r.response.sha256() == kiln::cache::Sha256Hex(r.response.cubin()));
  }
  CHECK(Stats(third_rpc).compiles() == 0);
  // What it got from Redis is in its own cache now.
  auto entry = RunCli(third, {"cache", "get", key_a.substr(0, 16), "--json"});
  CHECK_THAT(entry.output, Catch::Contains("the remote cache redis://127.0.0.1:"));
}

TEST_CASE("Redis stopped and restarted mid-run fails no request and is used again", "[remote]") {
  TempDir dir;
  RedisServer redis;
  DaemonProcess d(Member(dir, "d", redis, {"--remote-cache-timeout-ms", "200"}));
  Rpc rpc(d.channel());
  REQUIRE(Get(rpc, Rmsnorm(1024)).status.ok());
  REQUIRE(Eventually([&] { return Stats(rpc).remote_published() == 1; }, std::chrono::seconds(10)));

  redis.Stop();
  // Concurrent misses while it is down: compiled here, none fails, one log line.
  std::vector<std::future<Reply>> during;
  for (int h : {1152, 1280, 1152, 1280})
    during.push_back(std::async(std::launch::async, [&, h] { return Get(rpc, Rmsnorm(h)); }));
  for (auto& f : during) {
    Reply r = f.get();
    INFO(r.status.error_message());
    CHECK(r.status.ok());
    CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
  }
  CHECK_THAT(Stats(rpc).remote_cache(), Catch::Contains(": down ("));
  CHECK(Count(d.Log(), "unreachable or unusable") == 1);

  redis.Start();  // the same port, empty
  REQUIRE(Eventually([&] { return Stats(rpc).remote_cache() == redis.url() + "/0: up"; }, std::chrono::seconds(40)));
  CHECK(Count(d.Log(), "reachable again") == 1);
  CHECK(Count(d.Log(), "unreachable or unusable") == 1);
  // Publishing resumes: a new compile reaches Redis, and another daemon is served from it.
  Reply after = Get(rpc, Rmsnorm(1408));
  REQUIRE(after.status.ok());
  CHECK(after.response.origin() == v1::ORIGIN_COMPILED);
  REQUIRE(Eventually([&] { return ValueOf(redis, after.response.cache_key()).has_value(); }, std::chrono::seconds(5)));
  CHECK(Eventually([&] { return Stats(rpc).remote_published() == 2; }, std::chrono::seconds(5)));
  const v1::CacheStats s = Stats(rpc);
  CHECK(s.remote_publish_dropped() == 2);  // the two compiles while it was down
  CHECK(s.compile_failures() == 0);
  DaemonProcess other(Member(dir, "other", redis));
  auto served = RunCli(other, {"get", "rmsnorm", "dtype=bf16", "hidden=1408", "--arch", "sm_90a"});
  INFO(served.output);
  CHECK(served.exit_code == 0);
  CHECK_THAT(served.output, Catch::Contains("origin   remote cache"));
}

TEST_CASE("a daemon whose Redis is down at start serves and compiles and offline never asks it", "[remote]") {
  TempDir dir;
  const std::string url = "redis://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  {
    DaemonProcess d({.root = dir / "d", .extra_args = {"--remote-cache", url}});
    Rpc rpc(d.channel());
    for (int h : {1024, 1152}) {
      Reply r = Get(rpc, Rmsnorm(h));
      REQUIRE(r.status.ok());
      CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
    }
    const v1::CacheStats s = Stats(rpc);
    CHECK_THAT(s.remote_cache(), Catch::StartsWith(url + "/0: down (cannot connect"));
    CHECK(s.remote_publish_dropped() == 2);
    CHECK(Count(d.Log(), "unreachable or unusable") == 1);
    auto stats = RunCli(d, {"cache", "stats"});
    CHECK_THAT(stats.output, Catch::Contains("remote cache"));
    CHECK_THAT(stats.output, Catch::Contains("2 not published"));
  }
  // A bad URL stops kilnd at start, naming the flag, as any bad flag does.
  auto bad = Run({.argv = {KilndPath(), "--kernels-dir", KernelsDir(), "--socket", dir / "bad.sock", "--remote-cache",
                           "redis//127.0.0.1"}});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains("--remote-cache \"redis//127.0.0.1\" must be a redis://HOST:PORT[/DB] URL"));
  DaemonProcess offline({.root = dir / "o", .extra_args = {"--remote-cache", url, "--offline", "--disable-jit"}});
  Rpc rpc(offline.channel());
  Reply miss = Get(rpc, Rmsnorm(1280));
  CHECK(miss.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(miss.status.error_message(),
             Catch::Contains("the remote cache " + url + " was not asked: the daemon is offline"));
  CHECK(Stats(rpc).remote_cache().empty());
  CHECK_THAT(offline.Log(), Catch::Contains("the remote cache " + url + "/0 is never contacted"));
}

// The tier itself, in this process, against the same real Redis: what the daemons' tests
// cannot time exactly.
namespace {

kiln::server::RemoteCacheOptions TierOptions(const RedisServer& redis, const std::string& owner) {
  kiln::server::RemoteCacheOptions o;
  REQUIRE(kiln::server::ParseRedisUrl(redis.url(), &o.url).empty());
  o.owner = owner;
  return o;
}

}  // namespace

TEST_CASE("a compile lease is renewed while held and deleted only by its holder", "[remote]") {
  using Lease = kiln::server::RemoteCache::Lease;
  RedisServer redis;
  auto options = TierOptions(redis, "test-a");
  options.lease = std::chrono::milliseconds(300);
  kiln::server::RemoteCache a(options);
  options.owner = "test-b";
  kiln::server::RemoteCache b(options);
  const std::string lease_key = kiln::server::RemoteCache::LeaseKey("k1");

  REQUIRE(a.TryLease("k1") == Lease::kAcquired);
  CHECK(b.TryLease("k1") == Lease::kHeld);
  // Four lease times later it is still a's: renewed every 100 ms.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  auto token = redis.Get(lease_key);
  REQUIRE(token.has_value());
  CHECK_THAT(*token, Catch::StartsWith("test-a:"));
  CHECK(b.TryLease("k1") == Lease::kHeld);

  a.ReleaseLease("k1");
  CHECK(Eventually([&] { return !redis.Get(lease_key).has_value(); }, std::chrono::seconds(5)));
  CHECK(b.TryLease("k1") == Lease::kAcquired);
  // Someone else holds it now (b's expired while it stalled, say): b neither renews nor deletes it.
  redis.Set(lease_key, "intruder");
  b.ReleaseLease("k1");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(redis.Get(lease_key) == std::optional<std::string>("intruder"));
}

TEST_CASE("a stalled Redis times out and a full publish queue drops values without blocking", "[remote]") {
  RedisServer redis;
  auto options = TierOptions(redis, "test");
  options.timeout = std::chrono::milliseconds(200);
  options.queue = 2;
  kiln::server::RemoteCache cache(options);
  CHECK_THAT(cache.Describe(), Catch::EndsWith(": up"));
  auto cubin = std::make_shared<const std::string>(4096, 'x');
  auto entry = [&](int i) {
    v1::BundleEntry e;
    e.set_cache_key("key" + std::to_string(i));
    e.set_sha256(kiln::cache::Sha256Hex(*cubin));
    e.set_size_bytes(cubin->size());
    return e;
  };

  redis.Pause();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) cache.Publish(entry(i), cubin, false);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(100));  // never waits on Redis
  // The first value's SET times out; the queue held two more, and the other seven were dropped
  // at once; once Redis is down the queued ones are dropped too.
  CHECK(Eventually([&] { return cache.publish_dropped() == 10; }, std::chrono::seconds(5)));
  CHECK(cache.published() == 0);
  CHECK_THAT(cache.Describe(), Catch::Contains(": down (SET of a value: no answer within 200 ms"));
  // While down, lookups and leases cost nothing.
  const auto t1 = std::chrono::steady_clock::now();
  CHECK_FALSE(cache.Find("key1", "u", "a").has_value());
  CHECK(cache.TryLease("key1") == kiln::server::RemoteCache::Lease::kUnavailable);
  CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::milliseconds(100));

  redis.Resume();
  REQUIRE(Eventually([&] { return cache.Describe() == redis.url() + "/0: up"; }, std::chrono::seconds(40)));
  cache.Publish(entry(42), cubin, false);
  CHECK(Eventually([&] { return cache.published() == 1; }, std::chrono::seconds(5)));
  auto value = ValueOf(redis, "key42");
  REQUIRE(value.has_value());
  CHECK(IsGood(*value, "key42"));
  CHECK(value->publisher() == "test");
}
