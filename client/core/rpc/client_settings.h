// The process-wide client settings (kiln::Configure) and the connection they imply. Readers
// take a snapshot; Configure swaps in a new one, so a request in flight keeps its own.
#pragma once

#include <memory>
#include <string>

#include "client/core/rpc/daemon_connection.h"
#include "client/core/rpc/kernel_source.h"
#include "kiln/client.h"

namespace kiln::client {

struct Settings {
  ClientOptions options;
  std::string client_id;  // options.client_id or DefaultClientId()
  std::shared_ptr<const DaemonConnection> connection;
  std::shared_ptr<const KernelSource> source;  // the daemon or the embedded engine
};

// Made from the default options (KILN_SOCKET or the default socket) on first use; a setup
// error of its connection (KILN_TLS_*, KILN_INSECURE) then fails every call, saying why.
std::shared_ptr<const Settings> CurrentSettings();
// Keeps the current settings and returns the connection's setup error when there is one.
Status ReplaceSettings(const ClientOptions& options);

}  // namespace kiln::client
