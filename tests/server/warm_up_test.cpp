// kilnd --warm LIST with a real daemon: the list is asked for in the background through every
// tier (a prebuilt bundle included), each outcome and a summary are logged, clients are served
// meanwhile, a bad list stops the daemon naming file:line, and a stop mid-warm-up is prompt.
#include <catch2/catch.hpp>

#include <signal.h>

#include <thread>

#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;

namespace {

// Waits until the daemon's log holds `text` (or `timeout` passes).
bool WaitForLog(const DaemonProcess& d, const std::string& text, std::chrono::seconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (d.Log().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace

TEST_CASE("kilnd --warm asks for every spec of its list through every tier and logs a summary", "[warm]") {
  TempDir dir;
  // One spec is already in a bundle: the warm-up takes it from there instead of compiling.
  WriteFile(dir / "bundle.list", "rmsnorm dtype=fp16 hidden=2048\n");
  {
    DaemonProcess builder({.root = dir / "builder"});
    REQUIRE(RunCli(builder, {"aot", "build", "--arch", "sm_90a", "--ops", dir / "bundle.list", "--out", dir / "bundle"})
                .exit_code == 0);
  }
  WriteFile(dir / "warm.list", "rmsnorm dtype=bf16 hidden=4096 @sm_90a @sm_80\n"
                               "rmsnorm dtype=fp16 hidden=2048 @sm_90a\n"
                               "rmsnorm dtype=int8 hidden=4096 @sm_90a\n");
  DaemonProcess d({.root = dir / "d", .extra_args = {"--warm", dir / "warm.list", "--prebuilt", dir / "bundle"}});
  REQUIRE(WaitForLog(d, "warm-up from " + dir / "warm.list" + " done", std::chrono::seconds(120)));
  INFO(d.Log());
  CHECK_THAT(d.Log(), Catch::Contains("4 specs: 2 compiled, 1 prebuilt; 1 failed"));
  CHECK_THAT(d.Log(), Catch::Contains("rmsnorm_fp16_h2048 for sm_90a: prebuilt"));
  CHECK_THAT(d.Log(),
             Catch::Contains("rmsnorm dtype=int8 hidden=4096 for sm_90a (" + dir / "warm.list" + ":3) FAILED"));
  Rpc rpc(d.channel());
  const v1::CacheStats stats = Stats(rpc);
  CHECK(stats.compiles() == 2);
  CHECK(stats.prebuilt_hits() == 1);
  CHECK(stats.entries() == 3);
  for (const auto& arch : {"sm_90a", "sm_80"}) {
    auto r = Get(rpc, OpRequest("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}}, arch));
    REQUIRE(r.status.ok());
    CHECK(r.response.origin() == v1::ORIGIN_MEMORY);  // warm: no client pays a compile
  }
  // The compile jobs were the warm-up's, visible like any other.
  int warm_jobs = 0;
  for (const auto& job : Jobs(rpc))
    for (const auto& w : job.waiters()) warm_jobs += w.client().find("kilnd --warm") != std::string::npos;
  CHECK(warm_jobs == 2);
}

TEST_CASE("kilnd --warm replaces the list's archs by --arch and refuses a bad list at start", "[warm]") {
  TempDir dir;
  WriteFile(dir / "bare.list", "rmsnorm dtype=bf16 hidden=4096\n");
  {
    DaemonProcess no_arch({.root = dir / "a", .extra_args = {"--warm", dir / "bare.list"}, .wait_ready = false});
    auto code = no_arch.process().Wait(std::chrono::seconds(30));
    REQUIRE(code.has_value());
    CHECK(*code == 2);
    CHECK_THAT(no_arch.Log(), Catch::Contains(dir / "bare.list" + ":1: rmsnorm names no @ARCH target"));
  }
  WriteFile(dir / "bad.list", "rmsnorm dtype=bf16 hidden=4096 @sm_90a\nrmsnorm hidden\n");
  {
    DaemonProcess bad({.root = dir / "b", .extra_args = {"--warm", dir / "bad.list"}, .wait_ready = false});
    auto code = bad.process().Wait(std::chrono::seconds(30));
    REQUIRE(code.has_value());
    CHECK(*code == 2);
    CHECK_THAT(bad.Log(), Catch::Contains("--warm: " + dir / "bad.list" + ":2: 'rmsnorm hidden'"));
  }
  DaemonProcess d({.root = dir / "c", .extra_args = {"--warm", dir / "bare.list", "--arch", "sm_80"}});
  REQUIRE(WaitForLog(d, "done in", std::chrono::seconds(120)));
  CHECK_THAT(d.Log(), Catch::Contains("rmsnorm_bf16_h4096 for sm_80: compiled"));
  CHECK_THAT(d.Log(), Catch::Contains("1 specs: 1 compiled; 0 failed"));
}

TEST_CASE("a daemon stopped in the middle of its warm-up exits promptly and cleanly", "[warm]") {
  TempDir dir;
  std::string list;
  for (int hidden = 1024; hidden <= 1024 * 24; hidden += 1024)
    list += "rmsnorm dtype=bf16 hidden=" + std::to_string(hidden) + " @sm_90a\n";
  WriteFile(dir / "long.list", list);
  DaemonProcess d({.root = dir / "d", .extra_args = {"--warm", dir / "long.list", "--max-jobs", "1"}});
  REQUIRE(WaitForLog(d, "warm-up 1/24", std::chrono::seconds(60)));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(d.Terminate(std::chrono::seconds(60)) == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
  CHECK_THAT(d.Log(), !Catch::Contains("done in"));
  CHECK_THAT(d.Log(), Catch::Contains("kilnd stopped"));
}
