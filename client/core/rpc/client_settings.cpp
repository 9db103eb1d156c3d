#include "client/core/rpc/client_settings.h"

#include <mutex>

#include "client/core/rpc/client_identity.h"

namespace kiln::client {
namespace {

std::mutex& Mutex() {
  static std::mutex mu;
  return mu;
}

std::shared_ptr<const Settings>& Slot() {
  static auto* slot = new std::shared_ptr<const Settings>();  // leaked: used until exit
  return *slot;
}

std::shared_ptr<const Settings> Make(const ClientOptions& options) {
  auto settings = std::make_shared<Settings>();
  settings->options = options;
  settings->client_id = options.client_id.empty() ? DefaultClientId() : options.client_id;
  const TransportSecurity security{options.tls_ca, options.tls_cert, options.tls_key, options.insecure};
  settings->connection = std::make_shared<DaemonConnection>(options.socket, security);
  settings->source = std::make_shared<KernelSource>(options.mode, settings->connection);
  return settings;
}

}  // namespace

std::shared_ptr<const Settings> CurrentSettings() {
  std::lock_guard<std::mutex> lock(Mutex());
  if (Slot() == nullptr) Slot() = Make(ClientOptions{});
  return Slot();
}

Status ReplaceSettings(const ClientOptions& options) {
  auto fresh = Make(options);
  if (const Status& error = fresh->connection->setup_error(); !error.ok()) return error;
  std::lock_guard<std::mutex> lock(Mutex());
  Slot() = std::move(fresh);
  return OkStatus();
}

}  // namespace kiln::client
