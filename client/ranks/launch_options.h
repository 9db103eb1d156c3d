// LaunchOptions: kiln-launch's command line — how many ranks, how long the others may run on
// after one fails, whether to tag output lines — and the command every rank runs.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace kiln::launch {

inline constexpr int kMaxRanks = 64;

struct LaunchOptions {
  int nproc = 0;
  std::chrono::milliseconds grace = std::chrono::seconds(30);
  bool tag = false;
  bool help = false;
  bool version = false;
  std::vector<std::string> command;  // argv of every rank
};

struct ParsedLaunch {
  LaunchOptions options;
  std::string error;  // non-empty: a usage error, said in one line
};

// Options stop at "--" or at the first word that is not an option: the rest is the command.
ParsedLaunch ParseLaunchArguments(const std::vector<std::string>& args);

std::string LaunchUsage();

}  // namespace kiln::launch
