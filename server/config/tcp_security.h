// How kilnd's TCP port (--listen) is secured: TLS with a server certificate, mutual TLS when a
// client CA is given too, or plaintext only when --insecure asks for it by name. A TCP port
// reaches beyond this machine, where the unix socket's file permissions protect nothing, so
// kilnd never serves it unauthenticated by default.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::server {

struct DaemonConfig;

// A setting's value from its flag, else its variable; `where` names whichever was used.
using SettingPicker = std::function<std::optional<std::string>(const char* flag, const char* env, std::string* where)>;

// Checks --listen against --insecure, --tls-cert, --tls-key and --tls-client-ca (config->listen
// and config->insecure already parsed; `insecure_where` names where --insecure came from, empty
// when unset) and reads the PEM files into config. INVALID_ARGUMENT naming the flags or the file.
absl::Status LoadTcpSecurity(const SettingPicker& pick, const std::string& insecure_where, DaemonConfig* config);

// The PEM text of `path` when it holds a `-----BEGIN <label>` block (label "CERTIFICATE", or
// "PRIVATE KEY" for any key type); otherwise INVALID_ARGUMENT naming `where`, the file and why.
absl::StatusOr<std::string> ReadPemFile(const std::string& where, const std::string& path, const std::string& label);

}  // namespace kiln::server
