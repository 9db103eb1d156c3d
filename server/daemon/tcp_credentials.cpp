#include "server/daemon/tcp_credentials.h"

#include <grpcpp/security/server_credentials.h>

#include "absl/strings/str_cat.h"
#include "server/config/daemon_config.h"

namespace kiln::server {

std::shared_ptr<grpc::ServerCredentials> TcpServerCredentials(const DaemonConfig& config) {
  if (config.insecure) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({config.tls_key_pem, config.tls_cert_pem});
  if (!config.tls_client_ca_pem.empty()) {
    options.pem_root_certs = config.tls_client_ca_pem;
    // Mutual TLS: a client without a certificate signed by the CA does not get past the handshake.
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  } else {
    options.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  }
  return grpc::SslServerCredentials(options);
}

std::string DescribeTcpSecurity(const DaemonConfig& config) {
  if (config.insecure) return "plaintext (--insecure)";
  std::string text = absl::StrCat("TLS (certificate ", config.tls_cert, ")");
  if (config.tls_client_ca.empty()) return text + ", no client certificate asked for";
  return absl::StrCat(text, ", client certificates required, signed by ", config.tls_client_ca);
}

}  // namespace kiln::server
