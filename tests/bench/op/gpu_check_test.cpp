// The GPU correctness check every op gets from its kiln-bench routine: kiln-bench --check, as a
// process against a real kilnd, runs every backend of every routine at each dtype and check
// shape (small and awkward sizes) on fresh random inputs with poisoned outputs, against the
// routine's float64 CPU reference. A new op with a routine is covered here without a test of
// its own (docs/adding-a-kernel.md); the family tests add strides, misaligned pointers and the
// cases only that op has.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>

#include "tests/support/daemon_process.h"
#include "tests/support/gpu_capability.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace kiln::bench {
namespace {

// The kiln-bench under test: the build tree's, unless KILN_TEST_KILN_BENCH names another (a
// bundle on the GPU machine).
std::string KilnBenchPath() {
  const char* env = std::getenv("KILN_TEST_KILN_BENCH");
  return env != nullptr && *env != '\0' ? env : KILN_TEST_KILN_BENCH;
}

TEST_CASE("every routine's backends match float64 on the GPU at their check shapes", "[gpu][bench]") {
  testing::RequireGpu();
  testing::TempDir dir("kiln-bench-check");
  testing::DaemonOptions daemon_options;
  daemon_options.root = dir.path();
  testing::DaemonProcess daemon(daemon_options);
  testing::SubprocessOptions options;
  options.argv = {KilnBenchPath(), "--check", "--socket", daemon.socket()};
  auto r = testing::Run(options, std::chrono::seconds(540));
  INFO(r.output);
  // The summary on the test's own output, for the GPU round's log.
  if (const size_t summary = r.output.rfind("# "); summary != std::string::npos)
    std::printf("kiln-bench --check: %s", r.output.substr(summary).c_str());
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("FAIL") == std::string::npos);
  CHECK(r.output.find(" checks: ") != std::string::npos);
  CHECK(r.output.find("pass  rmsnorm bf16 kiln rows=1,hidden=1: kiln checked against float64") != std::string::npos);
  CHECK(r.output.find(" 0 failed") != std::string::npos);
}

}  // namespace
}  // namespace kiln::bench
