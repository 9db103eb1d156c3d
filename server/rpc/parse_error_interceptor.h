// A request whose bytes are not its method's protobuf message never reaches a service: gRPC
// answers it INTERNAL with an empty message (protobuf's InitializationErrorString, always
// empty for proto3), which reads as a daemon bug and tells the client nothing (issue 15). This
// interceptor turns that answer into INVALID_ARGUMENT naming the method. Every INTERNAL that
// kilnd itself sends has a message (grpc_status.h), so an empty one can only be gRPC's.
#pragma once

#include <memory>

#include <grpcpp/support/server_interceptor.h>

namespace kiln::server {

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> ParseErrorInterceptorFactory();

}  // namespace kiln::server
