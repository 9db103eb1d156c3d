#include "client/core/rpc/daemon_connection.h"
#include "client/core/rpc/local_fetch_client.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <grpcpp/grpcpp.h>

#include "proto/endpoint.h"

namespace kiln::client {
namespace {

// "unix:/x" and "unix:///x" name the socket /x; anything else is not a unix socket.
std::string SocketPathOf(const std::string& target) {
  if (target.rfind("unix://", 0) == 0) return target.substr(7);
  if (target.rfind("unix:", 0) == 0) return target.substr(5);
  return "";
}

constexpr const char* kHowToPoint =
    "point KILN_SOCKET (or --socket, kiln::ClientOptions::socket, kiln_set_socket) at the "
    "socket of a running kilnd";

}  // namespace

StatusCode CodeForCanonical(int canonical) {
  switch (static_cast<grpc::StatusCode>(canonical)) {
    case grpc::StatusCode::OK: return StatusCode::kOk;
    case grpc::StatusCode::INVALID_ARGUMENT: return StatusCode::kInvalidArgument;
    case grpc::StatusCode::OUT_OF_RANGE: return StatusCode::kInvalidArgument;
    case grpc::StatusCode::NOT_FOUND: return StatusCode::kNotFound;
    case grpc::StatusCode::FAILED_PRECONDITION: return StatusCode::kFailedPrecondition;
    case grpc::StatusCode::ALREADY_EXISTS: return StatusCode::kFailedPrecondition;
    case grpc::StatusCode::UNAVAILABLE: return StatusCode::kUnavailable;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return StatusCode::kDeadlineExceeded;
    case grpc::StatusCode::DATA_LOSS: return StatusCode::kDataLoss;
    case grpc::StatusCode::INTERNAL: return StatusCode::kInternal;
    case grpc::StatusCode::UNIMPLEMENTED: return StatusCode::kUnimplemented;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return StatusCode::kResourceExhausted;
    case grpc::StatusCode::PERMISSION_DENIED: return StatusCode::kPermissionDenied;
    case grpc::StatusCode::UNAUTHENTICATED: return StatusCode::kPermissionDenied;
    default: return StatusCode::kUnknown;  // CANCELLED, ABORTED, UNKNOWN
  }
}

DaemonConnection::DaemonConnection(const std::string& socket_or_target, const TransportSecurity& security) {
  target_ = proto::GrpcTargetFor(socket_or_target.empty() ? proto::ResolveSocketPath() : socket_or_target);
  socket_ = SocketPathOf(target_);
  if (!socket_.empty()) local_fetch_ = std::make_shared<LocalFetchClient>(socket_);
  const TransportSecurity resolved = security.OrEnvironment();
  auto credentials = ChannelCredentialsFor(target_, !socket_.empty(), resolved);
  tls_ = socket_.empty() && !resolved.insecure;
  grpc::ChannelArguments args;
  // Cubins of big kernels can pass gRPC's 4 MiB default.
  args.SetMaxReceiveMessageSize(256 << 20);
  // After a failed connect gRPC backs off up to 2 minutes before it tries again; a daemon
  // that comes back (a restart, a roll-out) should be found within a second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // gRPC also takes the minimum backoff as the time a connection attempt (the HTTP/2
  // handshake included) may take. It is not the backoff floor's 100 ms: a kilnd started by
  // socket activation, or recovering a large cache, answers its first connection later than
  // that, and a missing daemon fails at once (no socket file, or refused) whatever it is.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  if (credentials.ok()) {
    channel_ = grpc::CreateCustomChannel(target_, *credentials, args);
  } else {
    // No credentials: gRPC makes a "lame" channel on which every call fails at once, so the
    // callers need no check of their own; Explain gives setup_error_ instead of gRPC's text.
    setup_error_ = credentials.status();
    channel_ = grpc::CreateCustomChannel(target_, nullptr, args);
  }
}

Status DaemonConnection::Explain(const grpc::Status& status, std::string_view what) const {
  const std::string prefix(what);
  if (!setup_error_.ok()) return Status(setup_error_.code(), prefix + ": " + setup_error_.message());
  const StatusCode code = CodeForCanonical(status.error_code());
  if (code == StatusCode::kUnavailable) {
    std::string why = "kilnd is not reachable at " + target_;
    if (!socket_.empty()) {
      struct stat st {};
      if (stat(socket_.c_str(), &st) != 0) {
        why += ": no socket file " + socket_ + " (" + std::strerror(errno) +
               "). Is kilnd running? Start it (`kilnd --socket " + socket_ +
               "`, or `systemctl start kilnd` for the system service), or " + kHowToPoint;
      } else if (!S_ISSOCK(st.st_mode)) {
        why += ": " + socket_ + " exists but is not a socket; " + kHowToPoint;
      } else if (access(socket_.c_str(), R_OK | W_OK) != 0) {
        why += ": not allowed to connect to " + socket_ + " (" + std::strerror(errno) +
               "); ask for access to its group, or " + kHowToPoint;
      } else {
        why += " (" + status.error_message() + "): the socket " + socket_ +
               " exists but nobody answers; kilnd may have stopped without removing it. "
               "Start kilnd again, or " +
               kHowToPoint;
      }
    } else {
      why += " (" + status.error_message() + "). Is kilnd listening there? Start it, or " + kHowToPoint;
      why += tls_
                 ? ". Over TLS, also check that KILN_TLS_CA is the CA that signed kilnd's certificate, that the "
                   "certificate names this host, and, where kilnd requires client certificates (--tls-client-ca), "
                   "that KILN_TLS_CERT and KILN_TLS_KEY are one signed by that CA"
                 : ". This channel is plaintext (KILN_INSECURE): a kilnd serving TLS there refuses it; set KILN_TLS_CA "
                   "instead";
    }
    return Status(code, prefix + ": " + why);
  }
  if (code == StatusCode::kDeadlineExceeded)
    return Status(code,
                  prefix + ": kilnd at " + target_ +
                      " did not answer in time (raise the timeout if compiles are slow): " + status.error_message());
  if (code == StatusCode::kUnimplemented)
    return Status(code,
                  prefix + ": the server at " + target_ +
                      " does not implement this call (is it a kilnd of another version?): " + status.error_message());
  return Status(code, prefix + ": " + status.error_message());
}

}  // namespace kiln::client
