// The artifact repository (kilnd --artifact-url) against real web servers on loopback
// (tests/support/artifact_http_server.py: Python's http.server, with faults on demand): the
// happy path through kiln aot index; the flag replacing the variable (a mirror); a 404; a
// truncated body; a wrong checksum (and the loud skip-checksum aid); a stalled server (a
// timeout, no hang); a server killed mid-download; offline mode with and without local
// artifacts. Every failure ends in a compile (JIT on) or a clear refusal (JIT off).
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <future>
#include <thread>

#include "cache/sha256.h"
#include "proto/bundle_layout.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;
namespace fs = std::filesystem;

namespace {

const std::map<std::string, std::string> kBf16_4096 = {{"dtype", "bf16"}, {"hidden", "4096"}};
const std::map<std::string, std::string> kFp16_2048 = {{"dtype", "fp16"}, {"hidden", "2048"}};

// A web server over `root` (faults: see the script), on an ephemeral loopback port.
class WebServer {
 public:
  explicit WebServer(const std::string& root, std::vector<std::string> fault = {}) {
    SubprocessOptions p;
    p.argv = {"/usr/bin/python3", std::string(KILN_TEST_SOURCE_DIR) + "/tests/support/artifact_http_server.py", root};
    for (auto& f : fault) p.argv.push_back(f);
    process_ = std::make_unique<Subprocess>(p);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end) {
      const std::string out = process_->Output();
      if (auto at = out.find("PORT "); at != std::string::npos && out.find('\n', at) != std::string::npos) {
        port_ = std::stoi(out.substr(at + 5));
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL("the web server did not start: " << process_->Output());
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // How many requests named a path containing `part`.
  int Requests(const std::string& part) const {
    int n = 0;
    const std::string log = process_->Output();
    for (size_t at = log.find("GET "); at != std::string::npos; at = log.find("GET ", at + 1)) {
      const size_t end = log.find('\n', at);
      if (log.substr(at, end - at).find(part) != std::string::npos) ++n;
    }
    return n;
  }
  void Kill9() { process_->Signal(SIGKILL), process_->Wait(std::chrono::seconds(10)); }

 private:
  std::unique_ptr<Subprocess> process_;
  int port_ = 0;
};

// A repository at <dir>/repo holding one bundle, "fleet", of two rmsnorm specs for sm_90a, built
// by a daemon of its own; returns the bundle's manifest.
v1::BundleManifest MakeRepository(const TempDir& dir) {
  WriteFile(dir / "fleet.list", "rmsnorm dtype=bf16 hidden=4096\nrmsnorm dtype=fp16 hidden=2048\n");
  DaemonProcess builder({.root = dir / "builder"});
  auto built = RunCli(builder,
                      {"aot", "build", "--arch", "sm_90a", "--ops", dir / "fleet.list", "--out", dir / "repo/fleet"});
  REQUIRE(built.exit_code == 0);
  SubprocessOptions index;
  index.argv = {KilnCliPath(), "aot", "index", dir / "repo"};
  auto indexed = Run(index);
  INFO(indexed.output);
  REQUIRE(indexed.exit_code == 0);
  CHECK_THAT(indexed.output, Catch::Contains("lists 1 bundles (2 entries)"));
  auto manifest = kiln::proto::ReadBundleManifest(dir / "repo/fleet");
  REQUIRE(manifest.error.empty());
  return manifest.manifest;
}

std::string BlobOf(const TempDir& dir, const v1::BundleManifest& m, const std::string& uri) {
  for (const auto& e : m.entries())
    if (e.uri() == uri) return kiln::proto::BundleBlobPath(dir / "repo/fleet", e.sha256());
  FAIL("no entry " << uri);
  return "";
}

}  // namespace

TEST_CASE("a daemon fetches what it lacks from the artifact repository, verified, and keeps it", "[repository]") {
  TempDir dir;
  const v1::BundleManifest m = MakeRepository(dir);
  WebServer web(dir / "repo");
  {
    // The flag names a trusted mirror and wins over the (here unreachable) variable.
    DaemonProcess d({.root = dir / "d",
                     .extra_args = {"--artifact-url", web.url() + "/", "--disable-jit"},
                     .env = {{"KILN_ARTIFACT_URL", "http://127.0.0.1:9/"}}});
    Rpc rpc(d.channel());
    for (const auto& params : {kBf16_4096, kFp16_2048}) {
      auto r = Get(rpc, OpRequest("rmsnorm", params, "sm_90a"));
      INFO(d.Log());
      REQUIRE(r.status.ok());
      CHECK(r.response.origin() == v1::ORIGIN_REPOSITORY);
      bool listed = false;
      for (const auto& e : m.entries())
        listed |= e.cache_key() == r.response.cache_key() && e.sha256() == r.response.sha256();
      CHECK(listed);
      CHECK(Get(rpc, OpRequest("rmsnorm", params, "sm_90a")).response.origin() == v1::ORIGIN_MEMORY);
    }
    const v1::CacheStats stats = Stats(rpc);
    CHECK(stats.repository_hits() == 2);
    CHECK(stats.compiles() == 0);
    CHECK(stats.entries() == 2);
    CHECK_THAT(stats.repository(), Catch::Contains(web.url() + ": 1 bundles, 2 entries"));
    CHECK(web.Requests("/index.json") == 1);
    CHECK(web.Requests("/fleet/manifest.json") == 1);
    CHECK(web.Requests("/blobs/") == 2);
    // A miss names the repository it asked.
    auto miss = Get(rpc, OpRequest("rmsnorm", {{"dtype", "bf16"}, {"hidden", "1024"}}, "sm_90a"));
    CHECK(miss.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(miss.status.error_message(), Catch::Contains("the artifact repository " + web.url()));
  }
  // What it fetched is in its cache now.
  DaemonProcess again({.root = dir / "d", .extra_args = {"--disable-jit"}});
  Rpc rpc(again.channel());
  CHECK(Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a")).response.origin() == v1::ORIGIN_DISK);

  // The variable alone sets the URL too.
  DaemonProcess by_env({.root = dir / "e", .extra_args = {"--disable-jit"}, .env = {{"KILN_ARTIFACT_URL", web.url()}}});
  Rpc env_rpc(by_env.channel());
  CHECK(Get(env_rpc, OpRequest("rmsnorm", kFp16_2048, "sm_90a")).response.origin() == v1::ORIGIN_REPOSITORY);
}

TEST_CASE("a missing blob or a wrong checksum in the repository is never served", "[repository]") {
  TempDir dir;
  const v1::BundleManifest m = MakeRepository(dir);
  fs::remove(BlobOf(dir, m, "rmsnorm_bf16_h4096"));  // a 404
  const std::string blob = BlobOf(dir, m, "rmsnorm_fp16_h2048");
  std::string bytes = ReadFile(blob);
  bytes[bytes.size() / 3] = char(bytes[bytes.size() / 3] ^ 0x5a);  // a flipped byte
  fs::permissions(blob, fs::perms::owner_write, fs::perm_options::add);
  WriteFile(blob, bytes);
  WebServer web(dir / "repo");
  {
    DaemonProcess strict({.root = dir / "strict", .extra_args = {"--artifact-url", web.url(), "--disable-jit"}});
    Rpc rpc(strict.channel());
    for (const auto& params : {kBf16_4096, kFp16_2048})
      CHECK(Get(rpc, OpRequest("rmsnorm", params, "sm_90a")).status.error_code() ==
            grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(Stats(rpc).repository_rejected() == 2);
    CHECK_THAT(strict.Log(), Catch::Contains("HTTP 404"));
    CHECK_THAT(strict.Log(), Catch::Contains("SHA-256"));
    CHECK(web.Requests("/blobs/") == 2);  // a 404 is not retried
  }
  {
    DaemonProcess jit({.root = dir / "jit", .extra_args = {"--artifact-url", web.url()}});
    Rpc rpc(jit.channel());
    auto r = Get(rpc, OpRequest("rmsnorm", kFp16_2048, "sm_90a"));
    REQUIRE(r.status.ok());
    CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
  }
  // The debugging aid serves it, loudly.
  DaemonProcess unsafe(
      {.root = dir / "unsafe",
       .extra_args = {"--artifact-url", web.url(), "--artifact-insecure-skip-checksum", "--disable-jit"}});
  Rpc rpc(unsafe.channel());
  auto served = Get(rpc, OpRequest("rmsnorm", kFp16_2048, "sm_90a"));
  REQUIRE(served.status.ok());
  CHECK(served.response.origin() == v1::ORIGIN_REPOSITORY);
  CHECK(served.response.sha256() == kiln::cache::Sha256Hex(served.response.cubin()));  // the bytes' own hash
  CHECK_THAT(unsafe.Log(), Catch::Contains("--artifact-insecure-skip-checksum is ON"));
  CHECK_THAT(unsafe.Log(), Catch::Contains("serving rmsnorm_fp16_h2048"));
}

TEST_CASE("a truncated body is retried then refused, and a stalled server times out", "[repository]") {
  TempDir dir;
  MakeRepository(dir);
  {
    WebServer web(dir / "repo", {"--fault", "truncate", "--fault-path", "/blobs/"});
    DaemonProcess d({.root = dir / "t", .extra_args = {"--artifact-url", web.url(), "--artifact-retries", "1"}});
    Rpc rpc(d.channel());
    auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
    REQUIRE(r.status.ok());
    CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
    CHECK(Stats(rpc).repository_rejected() == 1);
    CHECK(web.Requests("/blobs/") == 2);  // the first try and one retry
    CHECK_THAT(d.Log(), Catch::Contains("after 2 attempts"));
  }
  WebServer web(dir / "repo", {"--fault", "stall", "--fault-path", "/blobs/"});
  DaemonProcess d(
      {.root = dir / "s",
       .extra_args = {"--artifact-url", web.url(), "--artifact-timeout-s", "2", "--artifact-retries", "0"}});
  Rpc rpc(d.channel());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
  REQUIRE(r.status.ok());
  CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
  CHECK_THAT(d.Log(), Catch::Contains("timed out"));
}

TEST_CASE("a server killed in the middle of a download leaves no request hanging", "[repository]") {
  TempDir dir;
  MakeRepository(dir);
  WebServer web(dir / "repo", {"--fault", "hang-half", "--fault-path", "/blobs/"});
  DaemonProcess d(
      {.root = dir / "d",
       .extra_args = {"--artifact-url", web.url(), "--artifact-timeout-s", "60", "--artifact-retries", "2"}});
  Rpc rpc(d.channel());
  auto pending = std::async(std::launch::async, [&] { return Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a")); });
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (web.Requests("/blobs/") == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(web.Requests("/blobs/") == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // half the body is on its way
  web.Kill9();
  REQUIRE(pending.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  auto r = pending.get();
  REQUIRE(r.status.ok());
  CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
  CHECK(Stats(rpc).repository_rejected() == 1);
}

TEST_CASE("offline: the repository is never asked, local artifacts still serve", "[repository]") {
  TempDir dir;
  MakeRepository(dir);
  WebServer web(dir / "repo");
  {
    DaemonProcess d({.root = dir / "d", .extra_args = {"--artifact-url", web.url(), "--offline", "--disable-jit"}});
    Rpc rpc(d.channel());
    auto r = Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a"));
    CHECK(r.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK_THAT(r.status.error_message(), Catch::Contains("was not asked: the daemon is offline"));
    CHECK(Stats(rpc).offline());
  }
  {
    // A local bundle serves offline.
    DaemonProcess d({.root = dir / "b",
                     .extra_args = {"--artifact-url", web.url(), "--prebuilt", dir / "repo/fleet", "--disable-jit"},
                     .env = {{"KILN_OFFLINE", "1"}}});
    Rpc rpc(d.channel());
    CHECK(Get(rpc, OpRequest("rmsnorm", kBf16_4096, "sm_90a")).response.origin() == v1::ORIGIN_PREBUILT);
  }
  CHECK(web.Requests("/") == 0);  // not one request reached the server
}

TEST_CASE("an unreachable repository is reported once and the daemon compiles meanwhile", "[repository]") {
  TempDir dir;
  DaemonProcess d(
      {.root = dir / "d", .extra_args = {"--artifact-url", "http://127.0.0.1:9", "--artifact-retries", "0"}});
  Rpc rpc(d.channel());
  for (const auto& params : {kBf16_4096, kFp16_2048}) {
    auto r = Get(rpc, OpRequest("rmsnorm", params, "sm_90a"));
    REQUIRE(r.status.ok());
    CHECK(r.response.origin() == v1::ORIGIN_COMPILED);
  }
  CHECK_THAT(Stats(rpc).repository(), Catch::Contains("unreachable"));
  const std::string log = d.Log();
  size_t said = 0;
  for (size_t at = log.find("unreachable or unusable"); at != std::string::npos;
       at = log.find("unreachable or unusable", at + 1))
    ++said;
  CHECK(said == 1);  // once per state change, not per request
}
