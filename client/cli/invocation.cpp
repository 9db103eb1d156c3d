#include <ostream>

#include "client/cli/command.h"
#include "client/core/rpc/daemon_connection.h"
#include "kiln/client.h"

namespace kiln::cli {

std::string Invocation::Get(const std::string& option, const std::string& fallback) const {
  auto it = values_.find(option);
  return it == values_.end() || it->second.empty() ? fallback : it->second.back();
}

const std::vector<std::string>& Invocation::All(const std::string& option) const {
  static const std::vector<std::string> none;
  auto it = values_.find(option);
  return it == values_.end() ? none : it->second;
}

const client::DaemonConnection& Invocation::Connection() {
  if (connection_ == nullptr) connection_ = std::make_shared<client::DaemonConnection>(socket, security);
  if (!connection_->setup_error().ok()) throw UsageError(connection_->setup_error().message());
  return *connection_;
}

Status Invocation::ConfigureLibraryClient() const {
  if (socket.empty()) return OkStatus();
  ClientOptions options = CurrentOptions();
  options.socket = socket;
  options.tls_ca = security.ca_file;
  options.tls_cert = security.cert_file;
  options.tls_key = security.key_file;
  options.insecure = security.insecure;
  options.rpc_timeout = timeout;
  return Configure(options);
}

int Invocation::Fail(const Status& status) {
  err << "kiln " << spec_.path << ": " << status.message() << std::endl;
  return status.code() == StatusCode::kUnavailable ? kExitUnreachable : kExitDaemonError;
}

}  // namespace kiln::cli
