#include "tests/client/comm/rank_processes.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "tests/support/temp_dir.h"

namespace kiln::comm::testing {

std::vector<RankOutcome> RunRanks(int world_size, const std::function<std::string(int rank)>& body,
                                  std::chrono::milliseconds timeout) {
  kiln::testing::TempDir dir("kiln-ranks");
  std::vector<pid_t> pids(world_size, -1);
  std::vector<RankOutcome> outcomes(world_size);
  std::fflush(nullptr);
  for (int rank = 0; rank < world_size; ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      std::string report;
      try {
        report = body(rank);
      } catch (const std::exception& e) {
        report = std::string("exception: ") + e.what();
      } catch (...) {
        report = "unknown exception";
      }
      if (FILE* f = std::fopen((dir / ("rank-" + std::to_string(rank))).c_str(), "w")) {
        std::fwrite(report.data(), 1, report.size(), f);
        std::fclose(f);
      }
      ::_exit(report.empty() ? 0 : 1);  // no Catch2 reporting, no atexit handlers
    }
    pids[rank] = pid;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int running = world_size;
  while (running > 0) {
    for (int rank = 0; rank < world_size; ++rank) {
      if (pids[rank] < 0) continue;
      int status = 0;
      if (::waitpid(pids[rank], &status, WNOHANG) != pids[rank]) continue;
      outcomes[rank].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      pids[rank] = -1;
      --running;
    }
    if (running == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (int rank = 0; rank < world_size; ++rank) {
        if (pids[rank] < 0) continue;
        ::kill(pids[rank], SIGKILL);
        ::waitpid(pids[rank], nullptr, 0);
        outcomes[rank].exit_code = -1;
        outcomes[rank].report = "still running after the test's timeout (hung?)";
        pids[rank] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int rank = 0; rank < world_size; ++rank) {
    if (outcomes[rank].exit_code == -1) continue;
    try {
      outcomes[rank].report = kiln::testing::ReadFile(dir / ("rank-" + std::to_string(rank)));
    } catch (...) {
    }
  }
  return outcomes;
}

std::string Failures(const std::vector<RankOutcome>& outcomes, const std::vector<int>& expected_dead) {
  std::string text;
  for (size_t rank = 0; rank < outcomes.size(); ++rank) {
    if (std::find(expected_dead.begin(), expected_dead.end(), int(rank)) != expected_dead.end()) continue;
    const auto& o = outcomes[rank];
    if (o.exit_code == 0 && o.report.empty()) continue;
    text += "rank " + std::to_string(rank) + ": exit " + std::to_string(o.exit_code) + ": " + o.report + "\n";
  }
  return text;
}

std::string UniqueAbstractAddress() {
  static std::atomic<int> counter{0};
  return "@kiln-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

}  // namespace kiln::comm::testing
