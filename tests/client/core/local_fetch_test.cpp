// The same-node fetch (proto/local_fetch.h) between the client library and a real kilnd: the
// client asks over it by default on a unix socket and gets what gRPC gives, errors included;
// it reconnects to a daemon that restarted (kill -9) under its open connection; many threads
// share it; and a blob damaged on disk is caught by the CRC-32C check, or by SHA-256 when
// full_checksum asks for it. No GPU needed.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "kiln/client.h"
#include "kiln/kernel.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::StatusCode;
namespace fs = std::filesystem;

kiln::OpRequest Rmsnorm(const std::string& dtype, const std::string& hidden) {
  return {"rmsnorm", {{"dtype", dtype}, {"hidden", hidden}}};
}

struct Client {
  explicit Client(const std::string& socket, bool local_fetch = true, bool full_checksum = false) {
    kiln::ClientOptions options;
    options.socket = socket;
    options.mode = kiln::ClientMode::kDaemon;
    options.local_fetch = local_fetch;
    options.full_checksum = full_checksum;
    REQUIRE(kiln::Configure(options).ok());
  }
  ~Client() { kiln::Configure(kiln::ClientOptions{}); }
};

std::string BlobOf(const std::string& cache_dir, const std::string& sha256) {
  for (const auto& e : fs::recursive_directory_iterator(cache_dir))
    if (e.is_regular_file() && e.path().filename() == sha256) return e.path().string();
  return "";
}

TEST_CASE("on a unix socket the client fetches over the same-node protocol and gets what gRPC gives",
          "[client][daemon][local_fetch]") {
  kiln::testing::TempDir dir{"kiln-local-fetch"};
  kiln::testing::DaemonProcess daemon{kiln::testing::DaemonOptions{.root = dir.path()}};

  kiln::StatusOr<kiln::ModuleInfo> over_grpc = kiln::Status(StatusCode::kUnknown, "");
  {
    Client client(daemon.socket(), /*local_fetch=*/false);
    const auto before = kiln::GetClientStats();
    over_grpc = kiln::Prefetch(Rmsnorm("bf16", "2048"), "sm_90");
    REQUIRE(over_grpc.ok());
    const auto after = kiln::GetClientStats();
    CHECK(after.get_kernel_rpcs == before.get_kernel_rpcs + 1);
    CHECK(after.local_fetches == before.local_fetches);
  }
  Client client(daemon.socket());
  const auto before = kiln::GetClientStats();
  auto local = kiln::Prefetch(Rmsnorm("bf16", "2048"), "sm_90");
  INFO(local.status().ToString());
  REQUIRE(local.ok());
  CHECK(local->origin == kiln::Origin::kMemory);
  CHECK(local->cache_key == over_grpc->cache_key);
  CHECK(local->sha256 == over_grpc->sha256);
  CHECK(local->cubin_size == over_grpc->cubin_size);
  CHECK(local->params == over_grpc->params);
  REQUIRE(local->launch.size() == over_grpc->launch.size());
  CHECK(local->launch[0].block == over_grpc->launch[0].block);
  const auto after = kiln::GetClientStats();
  CHECK(after.get_kernel_rpcs == before.get_kernel_rpcs + 1);
  CHECK(after.local_fetches == before.local_fetches + 1);
  CHECK(after.blob_path_reads == before.blob_path_reads + 1);

  SECTION("the daemon's errors carry the same code and message") {
    std::vector<kiln::Status> errors;
    for (bool local_fetch : {true, false}) {
      Client again(daemon.socket(), local_fetch);
      errors.push_back(kiln::Prefetch(Rmsnorm("int4", "2048"), "sm_90").status());
    }
    CHECK(errors[0].code() == StatusCode::kInvalidArgument);
    CHECK(errors[0].code() == errors[1].code());
    CHECK(errors[0].message() == errors[1].message());
    CHECK(errors[0].message().find("int4") != std::string::npos);
  }
  SECTION("a daemon killed under the open connection: the next fetch reaches its successor") {
    daemon.Kill9();
    auto lost = kiln::Prefetch(Rmsnorm("bf16", "2048"), "sm_90");
    REQUIRE_FALSE(lost.ok());
    CHECK(lost.status().code() == StatusCode::kUnavailable);
    kiln::testing::DaemonProcess successor{kiln::testing::DaemonOptions{.root = dir.path()}};
    const auto mid = kiln::GetClientStats();
    auto found = kiln::Prefetch(Rmsnorm("bf16", "2048"), "sm_90");
    INFO(found.status().ToString());
    REQUIRE(found.ok());
    CHECK(found->sha256 == over_grpc->sha256);
    CHECK(found->origin == kiln::Origin::kDisk);
    CHECK(kiln::GetClientStats().local_fetches == mid.local_fetches + 1);
  }
  SECTION("sixteen threads at once, each with its own spec, share the protocol") {
    std::atomic<int> good{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; ++t)
      threads.emplace_back([&good, t] {
        if (kiln::Prefetch(Rmsnorm(t % 2 ? "fp16" : "bf16", std::to_string(256 * (1 + t / 2))), "sm_90").ok()) ++good;
      });
    for (auto& t : threads) t.join();
    CHECK(good == 16);
    CHECK(kiln::GetClientStats().local_fetches >= after.local_fetches + 16);
  }
}

TEST_CASE("the per-call fields appended to a same-node request reach the daemon: its client id names the job",
          "[client][daemon][local_fetch]") {
  // The client sends the request serialized once with client_id and prefer_blob_path appended
  // (cubin_fetch.cpp): the daemon must read them as set on the request.
  kiln::testing::TempDir dir{"kiln-local-fetch-id"};
  kiln::testing::DaemonProcess daemon{kiln::testing::DaemonOptions{.root = dir.path()}};
  kiln::ClientOptions options;
  options.socket = daemon.socket();
  options.mode = kiln::ClientMode::kDaemon;
  options.client_id = "local-fetch-id-probe";
  REQUIRE(kiln::Configure(options).ok());
  const auto before = kiln::GetClientStats();
  auto compiled = kiln::Prefetch(Rmsnorm("fp16", "1536"), "sm_90");
  kiln::Configure(kiln::ClientOptions{});
  INFO(compiled.status().ToString());
  REQUIRE(compiled.ok());
  CHECK(compiled->origin == kiln::Origin::kCompiled);
  const auto after = kiln::GetClientStats();
  CHECK(after.local_fetches == before.local_fetches + 1);
  CHECK(after.blob_path_reads == before.blob_path_reads + 1);  // prefer_blob_path arrived too

  kiln::testing::Rpc rpc(daemon.channel());
  bool found = false;
  for (const auto& job : kiln::testing::Jobs(rpc)) {
    if (job.cache_key() != compiled->cache_key) continue;
    found = true;
    REQUIRE(job.waiters_size() == 1);
    CHECK_THAT(job.waiters(0).client(), Catch::Contains("local-fetch-id-probe"));
  }
  CHECK(found);
}

TEST_CASE("a blob damaged on disk is caught by the CRC-32C, or by SHA-256 with full_checksum, and asked for again",
          "[client][daemon][local_fetch]") {
  kiln::testing::TempDir dir{"kiln-local-fetch-crc"};
  kiln::testing::DaemonProcess daemon{kiln::testing::DaemonOptions{.root = dir.path()}};
  const bool full_checksum = GENERATE(false, true);
  Client client(daemon.socket(), /*local_fetch=*/true, full_checksum);
  auto first = kiln::Prefetch(Rmsnorm("fp16", "768"), "sm_90");
  REQUIRE(first.ok());
  const std::string blob = BlobOf(daemon.cache_dir(), first->sha256);
  REQUIRE_FALSE(blob.empty());
  // One flipped byte in the middle, same size: only a checksum can tell.
  std::string bytes = kiln::testing::ReadFile(blob);
  bytes[bytes.size() / 2] ^= 0x20;
  fs::permissions(blob, fs::perms::owner_write, fs::perm_options::add);
  kiln::testing::WriteFile(blob, bytes);

  const auto before = kiln::GetClientStats();
  auto again = kiln::Prefetch(Rmsnorm("fp16", "768"), "sm_90");
  INFO(again.status().ToString());
  REQUIRE(again.ok());  // the second answer carried the daemon's verified bytes
  CHECK(again->sha256 == first->sha256);
  const auto after = kiln::GetClientStats();
  CHECK(after.get_kernel_rpcs == before.get_kernel_rpcs + 2);
  CHECK(after.blob_path_reads == before.blob_path_reads);
}

}  // namespace
