// The one place where an absl::Status becomes a gRPC status (the codes are the same numbers).
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace kiln::server {

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace kiln::server
