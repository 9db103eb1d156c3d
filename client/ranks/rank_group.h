// RankGroup: the ranks of one launch as child processes — started with their environment,
// watched until every one has exited, stopped together when one fails or when kiln-launch is
// asked to stop — and the exit status that sums them up.
#pragma once

#include "client/ranks/launch_options.h"
#include "client/ranks/rank_environment.h"

namespace kiln::launch {

inline constexpr int kExitLauncherError = 125;  // kiln-launch itself failed (fork, signalfd)
inline constexpr int kExitSkip = 77;

// Starts options.nproc copies of options.command and waits for all of them; returns
// kiln-launch's exit status (see LaunchUsage()).
int RunRankGroup(const LaunchOptions& options, const LaunchIdentity& identity);

}  // namespace kiln::launch
