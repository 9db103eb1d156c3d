// What the daemon says about tuning, asked once per process (per daemon target): whether it
// keeps a tuning store, the NVRTC it compiles with (part of every TuningEnvironment) and its
// tactic blocklist (kilnd --tactic-blocklist). Two RPCs on first use, none after.
#pragma once

#include <memory>
#include <vector>

#include "client/core/rpc/daemon_connection.h"
#include "kiln/status.h"
#include "kiln/v1/tuning.pb.h"

namespace kiln::client {

struct DaemonTuning {
  // false: the daemon predates TuningService (UNIMPLEMENTED): no store, no blocklist, and
  // info.nvrtc_version is empty.
  bool has_service = true;
  v1::TuningInfo info;
  std::vector<v1::BlockedTactic> blocked;
};

// Asks `connection`'s daemon (GetTuningInfo, ListBlockedTactics). Not cached.
StatusOr<DaemonTuning> AskDaemonTuning(const DaemonConnection& connection);

// The current connection's answer, asked once per process and target; a failure (the daemon
// unreachable) is not kept, so a later call asks again. A process on the embedded engine gets
// that engine's answer: its NVRTC, no store and no blocklist (both are a daemon's).
StatusOr<std::shared_ptr<const DaemonTuning>> GetDaemonTuning();

}  // namespace kiln::client
