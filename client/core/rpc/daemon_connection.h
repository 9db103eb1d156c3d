// DaemonConnection: where kilnd is (a unix socket, or a gRPC target), the channel to it (TLS or
// an explicit plaintext for TCP: transport_security.h), and how a failed call is explained to a
// person: which socket, and how to start kilnd.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "client/core/rpc/transport_security.h"
#include "kiln/status.h"

namespace grpc {
class Channel;
class Status;
}  // namespace grpc

namespace kiln::client {

class LocalFetchClient;

// A canonical status code (gRPC's and absl's share the numbering) as the client's.
StatusCode CodeForCanonical(int canonical);

class DaemonConnection {
 public:
  // A socket path ("/run/kiln/kilnd.sock") or gRPC target ("unix:/x", "localhost:7070").
  // Empty: KILN_SOCKET, else kilnd's default socket (proto/endpoint.h). `security` (empty: the
  // KILN_TLS_* and KILN_INSECURE variables) secures a TCP target; a unix socket ignores it.
  explicit DaemonConnection(const std::string& socket_or_target, const TransportSecurity& security = {});

  const std::string& target() const { return target_; }       // "unix:/run/kiln/kilnd.sock"
  const std::string& socket_path() const { return socket_; }  // empty unless a unix socket
  bool is_local() const { return !socket_.empty(); }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  // The same-node fetch's connections to the unix socket (null for a TCP target).
  LocalFetchClient* local_fetch() const { return local_fetch_.get(); }
  // Why no channel could be made (a TCP target without TLS or --insecure, an unreadable
  // certificate); OK otherwise. When not OK every call fails, and Explain says this.
  const Status& setup_error() const { return setup_error_; }

  // A failed call as a kiln::Status: "<what>: <why>". UNAVAILABLE says whether the socket file
  // exists, whether we may connect to it, and how to start kilnd or point at another socket.
  Status Explain(const grpc::Status& status, std::string_view what) const;

 private:
  std::string target_;
  std::string socket_;
  bool tls_ = false;  // a TCP target secured by TLS
  Status setup_error_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<LocalFetchClient> local_fetch_;
};

}  // namespace kiln::client
