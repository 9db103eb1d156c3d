// The multi-GPU tests as CTest sees them: skipped visibly with fewer than two GPUs; otherwise a
// real kilnd, then `kiln-launch -n 2 kiln_comm_rank_tests` (the checks run on both ranks at
// once; see comm_rank_tests.cpp), and the launcher's exit status and output judged here.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/client/ranks/kiln_launch_path.h"
#include "tests/support/daemon_process.h"
#include "tests/support/gpu_capability.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace kiln::testing {
namespace {

std::string RankTestsPath() {
  const char* env = std::getenv("KILN_TEST_COMM_RANK_TESTS");
  return env != nullptr && *env != '\0' ? env : KILN_COMM_RANK_TESTS;
}

RunResult LaunchRanks(DaemonProcess& daemon, int ranks, const std::string& filter, int grace_s = 10) {
  SubprocessOptions options;
  options.argv = {comm::testing::KilnLaunchPath(),
                  "-n",
                  std::to_string(ranks),
                  "--grace-s",
                  std::to_string(grace_s),
                  RankTestsPath(),
                  filter};
  options.set_env = {{"KILN_SOCKET", daemon.socket()}};
  RunResult result = Run(options, std::chrono::seconds(590));
  // The ranks' own reports (test counts, timings) belong in the log even when all pass.
  std::printf("--- kiln-launch -n %d %s: exit %d ---\n%s--- end ---\n", ranks, filter.c_str(), result.exit_code,
              result.output.c_str());
  return result;
}

TEST_CASE("all-reduce across 2 GPUs: sizes, dtypes, algorithms, pieces, registered buffers, "
          "fused RMSNorm",
          "[gpu][multi_gpu]") {
  RequireGpus(2, 80);
  TempDir dir("kiln-comm");
  DaemonOptions options;
  options.root = dir.path();
  DaemonProcess daemon(options);
  RunResult result = LaunchRanks(daemon, 2, "~[.]");
  INFO(result.output);
  CHECK(result.exit_code == 0);
}

TEST_CASE("all-reduce across 2 GPUs: a rank killed with SIGKILL makes the other fail clearly", "[gpu][multi_gpu]") {
  RequireGpus(2, 80);
  TempDir dir("kiln-comm");
  DaemonOptions options;
  options.root = dir.path();
  DaemonProcess daemon(options);
  RunResult result = LaunchRanks(daemon, 2, "[death]", /*grace_s=*/60);
  INFO(result.output);
  CHECK(result.exit_code == 128 + 9);  // the launcher reports the killed rank's status
  CHECK_THAT(result.output, Catch::Contains("PEER-LOSS-DETECTED rank 0"));
}

TEST_CASE("all-reduce across 2 GPUs: a rank that never makes the call makes the other time out", "[gpu][multi_gpu]") {
  RequireGpus(2, 80);
  TempDir dir("kiln-comm");
  DaemonOptions options;
  options.root = dir.path();
  DaemonProcess daemon(options);
  RunResult result = LaunchRanks(daemon, 2, "[timeout]");
  INFO(result.output);
  CHECK(result.exit_code == 0);
  CHECK_THAT(result.output, Catch::Contains("PEER-TIMEOUT-DETECTED rank 0"));
}

}  // namespace
}  // namespace kiln::testing
