// The gRPC credentials of kilnd's TCP port (--listen), from the settings that config/tcp_security.h
// checked: TLS, mutual TLS, or plaintext (--insecure). Also the log line that says which.
#pragma once

#include <memory>
#include <string>

namespace grpc {
class ServerCredentials;
}

namespace kiln::server {

struct DaemonConfig;

std::shared_ptr<grpc::ServerCredentials> TcpServerCredentials(const DaemonConfig& config);

// "TLS (certificate F); client certificates required, signed by C" or the plaintext warning.
std::string DescribeTcpSecurity(const DaemonConfig& config);

}  // namespace kiln::server
