// Which of kilnd's settings the engine gets: DaemonConfig (flags, environment, defaults) →
// EngineOptions. The socket, TCP address, shutdown grace and log level stay with the daemon.
#pragma once

#include "server/config/daemon_config.h"
#include "server/engine/engine_options.h"

namespace kiln::server {

EngineOptions EngineOptionsFromConfig(const DaemonConfig& config);

}  // namespace kiln::server
