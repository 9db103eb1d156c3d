// The one place where an absl::Status becomes a gRPC status (the codes are the same numbers).
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace kiln::server {

// The message travels as the grpc-message header, and a header past gRPC's metadata limit (8 KiB
// by default) reaches the client as RESOURCE_EXHAUSTED "metadata size exceeds limit" instead of
// the real status (issue 15). The length checks at each RPC (request_limits.h) keep messages
// short; this cut is the net under what they cannot see, such as a line of a raw source's code
// that the include policy quotes.
inline constexpr size_t kMaxStatusMessageBytes = 4096;

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxStatusMessageBytes) {
    const size_t left_out = message.size() - kMaxStatusMessageBytes;
    message.resize(kMaxStatusMessageBytes);
    message += "... (" + std::to_string(left_out) + " more bytes of this message left out)";
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

}  // namespace kiln::server
