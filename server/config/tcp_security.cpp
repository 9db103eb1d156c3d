#include "server/config/tcp_security.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "kiln_base/status_macros.h"
#include "server/config/daemon_config.h"

namespace kiln::server {

absl::StatusOr<std::string> ReadPemFile(const std::string& where, const std::string& path, const std::string& label) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::InvalidArgumentError(absl::StrCat(where, " \"", path, "\" cannot be read: ", std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  std::string pem = text.str();
  // A key's label says its type ("RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY"): look for the
  // end of the label, after "-----BEGIN ".
  const bool found = label == "CERTIFICATE" ? pem.find("-----BEGIN CERTIFICATE-----") != std::string::npos
                                            : pem.find("PRIVATE KEY-----") != std::string::npos &&
                                                  pem.find("-----BEGIN ") != std::string::npos;
  if (!found)
    return absl::InvalidArgumentError(
        absl::StrCat(where, " \"", path, "\" holds no PEM ", label, " (a \"-----BEGIN ", label, "-----\" block)"));
  return pem;
}

absl::Status LoadTcpSecurity(const SettingPicker& pick, const std::string& insecure_where, DaemonConfig* c) {
  std::string cert_where, key_where, ca_where;
  c->tls_cert = pick("--tls-cert", "KILN_TLS_CERT", &cert_where).value_or("");
  c->tls_key = pick("--tls-key", "KILN_TLS_KEY", &key_where).value_or("");
  c->tls_client_ca = pick("--tls-client-ca", "KILN_TLS_CLIENT_CA", &ca_where).value_or("");
  const bool any_tls = !c->tls_cert.empty() || !c->tls_key.empty() || !c->tls_client_ca.empty();

  // Without --listen these would secure nothing: an error, so a typo in --listen's variable is
  // not read as "TLS is on".
  if (c->listen.empty()) {
    if (any_tls || c->insecure) {
      const std::string& given = !cert_where.empty()  ? cert_where
                                 : !key_where.empty() ? key_where
                                 : !ca_where.empty()  ? ca_where
                                                      : insecure_where;
      return absl::InvalidArgumentError(
          absl::StrCat(given, " is only for a TCP port, and no --listen HOST:PORT (KILN_LISTEN) is given; the unix "
                              "socket needs none (its file permissions protect it)"));
    }
    return absl::OkStatus();
  }
  if (c->insecure && any_tls)
    return absl::InvalidArgumentError(
        absl::StrCat(insecure_where, " and ",
                     !cert_where.empty()  ? cert_where
                     : !key_where.empty() ? key_where
                                          : ca_where,
                     " are both given: --listen serves either TLS or plaintext; drop one"));
  if (c->insecure) return absl::OkStatus();
  if (!any_tls)
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", c->listen,
                     " would serve TCP unauthenticated: give --tls-cert FILE and --tls-key FILE (KILN_TLS_CERT, "
                     "KILN_TLS_KEY) to serve TLS, with --tls-client-ca FILE (KILN_TLS_CLIENT_CA) to require client "
                     "certificates, or --insecure (KILN_INSECURE=1) to serve plaintext on a trusted network"));
  if (c->tls_cert.empty() || c->tls_key.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(c->tls_cert.empty() ? (c->tls_key.empty() ? ca_where : key_where) : cert_where,
                     " needs --tls-cert FILE and --tls-key FILE (KILN_TLS_CERT, KILN_TLS_KEY) together: the "
                     "certificate kilnd presents and its private key"));
  KILN_ABSL_ASSIGN_OR_RETURN(c->tls_cert_pem, ReadPemFile(cert_where, c->tls_cert, "CERTIFICATE"));
  KILN_ABSL_ASSIGN_OR_RETURN(c->tls_key_pem, ReadPemFile(key_where, c->tls_key, "PRIVATE KEY"));
  if (!c->tls_client_ca.empty()) {
    KILN_ABSL_ASSIGN_OR_RETURN(c->tls_client_ca_pem, ReadPemFile(ca_where, c->tls_client_ca, "CERTIFICATE"));
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
