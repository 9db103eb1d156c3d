// kilnd --metrics-listen as a real process: /metrics scraped over HTTP and parsed by
// Prometheus's own Python parser (tests/support/scrape_metrics.py); the series move with the
// traffic the test sends, the same-node fetch's included. A port in use stops kilnd at start naming the flag.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <map>

#include <nlohmann/json.hpp>

#include "kiln/v1/kernel.pb.h"
#include "proto/local_fetch.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/local_fetch_wire.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
using nlohmann::json;

namespace {

const std::map<std::string, std::string> kBf16_4096 = {{"dtype", "bf16"}, {"hidden", "4096"}};

// A loopback port bound and listening for as long as it lives (port 0: the kernel picks).
struct TcpPort {
  TcpPort() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd, 1);
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~TcpPort() { Close(); }
  void Close() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  int fd = -1;
  int port = 0;
};

// One scrape, as Prometheus's parser read it. Fails the test when the helper fails (no
// prometheus_client included: CI installs it, and a missing parser must not pass quietly).
json Scrape(const std::string& address) {
  auto run = Run({.argv = {"/usr/bin/python3", std::string(KILN_TEST_SOURCE_DIR) + "/tests/support/scrape_metrics.py",
                           "http://" + address + "/metrics"}});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  return json::parse(run.output.substr(run.output.find('{')));
}

// The value of the sample `name` whose labels include `labels`; -1 when there is none.
double Value(const json& scrape, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
  for (const auto& s : scrape["samples"]) {
    if (s["name"] != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) match = match && s["labels"].contains(k) && s["labels"][k] == v;
    if (match) return s["value"].get<double>();
  }
  return -1;
}

// One GetKernel over the same-node protocol (proto/local_fetch.h); true when answered OK.
bool LocalFetch(const std::string& socket, const std::map<std::string, std::string>& params) {
  kiln::v1::GetKernelRequest request;
  request.mutable_op()->set_name("rmsnorm");
  for (const auto& [k, v] : params) (*request.mutable_op()->mutable_params())[k] = v;
  request.mutable_target()->set_arch("sm_90");
  const kiln::testing::LocalFetchReply reply = kiln::testing::LocalFetchOnce(socket, request);
  return !reply.closed && reply.code == 0;
}

}  // namespace

TEST_CASE("kilnd --metrics-listen serves Prometheus text whose series move with traffic", "[metrics][daemon]") {
  TempDir dir;
  TcpPort reserved;
  std::string address = "127.0.0.1:" + std::to_string(reserved.port);
  reserved.Close();
  DaemonProcess d({.root = dir.path(), .extra_args = {"--metrics-listen", address}});
  Rpc rpc(d.channel());

  json before = Scrape(address);
  CHECK_THAT(before["content_type"].get<std::string>(), Catch::StartsWith("text/plain; version=0.0.4"));
  CHECK(before["families"]["kiln_build_info"] == "gauge");
  CHECK(before["families"]["kiln_compile_seconds"] == "histogram");
  CHECK(before["families"]["kiln_rpc_duration_seconds"] == "histogram");
  CHECK(Value(before, "kiln_build_info") == 1);
  CHECK(Value(before, "kiln_compiles_total") == 0);
  CHECK(Value(before, "kiln_compile_seconds_count") == 0);
  CHECK(Value(before, "kiln_cache_hits_total", {{"tier", "memory"}}) == 0);
  CHECK(Value(before, "kiln_cache_entries") == 0);

  // A compile: a miss, one compile, one observation of its time, one cache entry.
  REQUIRE(Get(rpc, OpRequest("rmsnorm", kBf16_4096)).status.ok());
  json compiled = Scrape(address);
  CHECK(Value(compiled, "kiln_cache_misses_total") == 1);
  CHECK(Value(compiled, "kiln_compiles_total") == 1);
  CHECK(Value(compiled, "kiln_compile_seconds_count") == 1);
  CHECK(Value(compiled, "kiln_compile_seconds_sum") > 0);
  CHECK(Value(compiled, "kiln_compile_seconds_bucket", {{"le", "+Inf"}}) == 1);
  CHECK(Value(compiled, "kiln_cache_entries") == 1);
  CHECK(Value(compiled, "kiln_cache_bytes") > 0);
  CHECK(Value(compiled, "kiln_compile_jobs_running") == 0);
  CHECK(Value(compiled, "kiln_rpc_duration_seconds_count", {{"method", "kiln.v1.KernelService/GetKernel"}}) == 1);

  // The same request again: a memory hit, no compile.
  REQUIRE(Get(rpc, OpRequest("rmsnorm", kBf16_4096)).status.ok());
  json hit = Scrape(address);
  CHECK(Value(hit, "kiln_cache_hits_total", {{"tier", "memory"}}) == 1);
  CHECK(Value(hit, "kiln_compiles_total") == 1);
  CHECK(Value(hit, "kiln_rpc_duration_seconds_count", {{"method", "kiln.v1.KernelService/GetKernel"}}) == 2);

  // GetStats is measured like every other method.
  const std::map<std::string, std::string> get_stats = {{"method", "kiln.v1.CacheService/GetStats"}};
  double stats_before = std::max(0.0, Value(hit, "kiln_rpc_duration_seconds_count", get_stats));
  Stats(rpc);
  Stats(rpc);
  json after = Scrape(address);
  CHECK(Value(after, "kiln_rpc_duration_seconds_count", get_stats) == stats_before + 2);
  CHECK(Value(after, "kiln_rpc_duration_seconds_bucket",
              {{"method", "kiln.v1.CacheService/GetStats"}, {"le", "+Inf"}}) == stats_before + 2);

  // A same-node fetch (the client library's default on the unix socket) has its own series.
  REQUIRE(LocalFetch(d.socket(), kBf16_4096));
  json local = Scrape(address);
  CHECK(Value(local, "kiln_rpc_duration_seconds_count", {{"method", "kiln.v1.KernelService/GetKernel:local"}}) == 1);
  CHECK(Value(local, "kiln_rpc_duration_seconds_count", {{"method", "kiln.v1.KernelService/GetKernel"}}) == 2);
}

TEST_CASE("kilnd stops at start naming --metrics-listen when its port is in use", "[metrics][daemon]") {
  TempDir dir;
  TcpPort taken;
  std::string address = "127.0.0.1:" + std::to_string(taken.port);
  DaemonProcess d({.root = dir.path(), .extra_args = {"--metrics-listen", address}, .wait_ready = false});
  auto code = d.process().Wait(std::chrono::seconds(30));
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK_THAT(d.Log(), Catch::Contains("--metrics-listen"));
  CHECK_THAT(d.Log(), Catch::Contains(address));
}

TEST_CASE("kilnd stops at start naming --metrics-listen when its host does not resolve", "[metrics][daemon]") {
  TempDir dir;
  DaemonProcess d(
      {.root = dir.path(), .extra_args = {"--metrics-listen", "no-such-host.invalid:9464"}, .wait_ready = false});
  auto code = d.process().Wait(std::chrono::seconds(30));
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK_THAT(d.Log(), Catch::Contains("--metrics-listen"));
  CHECK_THAT(d.Log(), Catch::Contains("no-such-host.invalid"));
}
