#include "client/core/rpc/transport_security.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <grpcpp/security/credentials.h>

namespace kiln::client {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

bool EnvTrue(const char* name) {
  const std::string v = Env(name);
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

// `what` ("KILN_TLS_CA") names the setting in errors; `certificate`: a CERTIFICATE block, else a
// PRIVATE KEY of any type ("-----BEGIN EC PRIVATE KEY-----").
StatusOr<std::string> ReadPem(const std::string& what, const std::string& path, bool certificate) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status(StatusCode::kInvalidArgument, what + " \"" + path + "\" cannot be read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  std::string pem = text.str();
  const bool found = certificate ? pem.find("-----BEGIN CERTIFICATE-----") != std::string::npos
                                 : pem.find("PRIVATE KEY-----") != std::string::npos;
  if (!found)
    return Status(StatusCode::kInvalidArgument,
                  what + " \"" + path + "\" holds no PEM " + (certificate ? "CERTIFICATE" : "PRIVATE KEY") + " block");
  return pem;
}

}  // namespace

TransportSecurity TransportSecurity::OrEnvironment() const {
  if (!empty()) return *this;
  TransportSecurity env;
  env.ca_file = Env("KILN_TLS_CA");
  env.cert_file = Env("KILN_TLS_CERT");
  env.key_file = Env("KILN_TLS_KEY");
  env.insecure = EnvTrue("KILN_INSECURE");
  return env;
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(const std::string& target, bool is_unix,
                                                                          const TransportSecurity& security) {
  if (is_unix) return grpc::InsecureChannelCredentials();
  const bool tls = !security.ca_file.empty() || !security.cert_file.empty() || !security.key_file.empty();
  if (security.insecure && tls)
    return Status(StatusCode::kInvalidArgument,
                  "TCP target " + target +
                      ": both plaintext (KILN_INSECURE, --insecure, ClientOptions::insecure) and TLS settings "
                      "are given; drop one");
  if (security.insecure) return grpc::InsecureChannelCredentials();
  if (security.ca_file.empty())
    return Status(StatusCode::kInvalidArgument,
                  "TCP target " + target +
                      " needs TLS or an explicit plaintext switch: set KILN_TLS_CA (kiln --tls-ca, "
                      "ClientOptions::tls_ca) to the CA that signed kilnd's certificate, or KILN_INSECURE=1 (kiln "
                      "--insecure, ClientOptions::insecure) for a kilnd started with --insecure");
  if (security.cert_file.empty() != security.key_file.empty())
    return Status(StatusCode::kInvalidArgument,
                  "TCP target " + target +
                      ": a client certificate needs both KILN_TLS_CERT and KILN_TLS_KEY (kiln --tls-cert and "
                      "--tls-key, ClientOptions::tls_cert and tls_key)");
  grpc::SslCredentialsOptions options;
  KILN_ASSIGN_OR_RETURN(options.pem_root_certs,
                        ReadPem("the TLS CA file (KILN_TLS_CA, --tls-ca)", security.ca_file, true));
  if (!security.cert_file.empty()) {
    KILN_ASSIGN_OR_RETURN(options.pem_cert_chain,
                          ReadPem("the TLS client certificate (KILN_TLS_CERT, --tls-cert)", security.cert_file, true));
    KILN_ASSIGN_OR_RETURN(options.pem_private_key,
                          ReadPem("the TLS client key (KILN_TLS_KEY, --tls-key)", security.key_file, false));
  }
  return grpc::SslCredentials(options);
}

}  // namespace kiln::client
