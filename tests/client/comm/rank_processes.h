// RankProcesses: one fork()ed child process per rank, each running the same test body, so a
// rendezvous test meets real processes (and can lose one to SIGKILL). A child reports through
// a file and its exit code, never through Catch2.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace kiln::comm::testing {

struct RankOutcome {
  int exit_code = -1;  // 128+signal when killed; -1 when it had to be killed after the timeout
  std::string report;  // what the body returned: empty means all went well
};

// Runs body(rank) in world_size child processes and waits for all of them (killing those
// still running after `timeout`). A body returns "" on success or what went wrong.
std::vector<RankOutcome> RunRanks(int world_size, const std::function<std::string(int rank)>& body,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(30));

// "rank 1: exit 1: <report>" for every rank that did not exit 0 with an empty report, except
// those in `expected_dead` (ranks that kill themselves on purpose).
std::string Failures(const std::vector<RankOutcome>& outcomes, const std::vector<int>& expected_dead = {});

// A fresh "@kiln-test-<pid>-<n>" address in the abstract namespace.
std::string UniqueAbstractAddress();

}  // namespace kiln::comm::testing
