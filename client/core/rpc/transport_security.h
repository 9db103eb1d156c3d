// How the client secures a channel to kilnd. A unix socket is protected by its file permissions
// and needs nothing. A TCP target reaches beyond this machine: it is TLS, verifying kilnd's
// certificate against a CA the caller names (and presenting a client certificate for a kilnd
// that requires one), or plaintext only when the caller asks for it by name.
#pragma once

#include <memory>
#include <string>

#include "kiln/status.h"

namespace grpc {
class ChannelCredentials;
}

namespace kiln::client {

struct TransportSecurity {
  std::string ca_file;    // PEM CA that signed kilnd's certificate (KILN_TLS_CA)
  std::string cert_file;  // PEM client certificate, for a kilnd that requires one (KILN_TLS_CERT)
  std::string key_file;   // its private key (KILN_TLS_KEY)
  bool insecure = false;  // plaintext TCP (KILN_INSECURE=1)

  bool empty() const { return ca_file.empty() && cert_file.empty() && key_file.empty() && !insecure; }
  // These settings when any is set (they replace the variables as a whole, so a shell's
  // variables never mix with a program's own settings), else the environment's.
  TransportSecurity OrEnvironment() const;
};

// The credentials of a channel to `target` (a gRPC target; `is_unix` when a unix socket):
// plaintext for a unix socket; for TCP, TLS or --insecure plaintext. INVALID_ARGUMENT naming
// the setting when TCP has neither, or a file that cannot be read or holds no PEM block.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(const std::string& target, bool is_unix,
                                                                          const TransportSecurity& security);

}  // namespace kiln::client
