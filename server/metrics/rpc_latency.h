// RpcLatency: a latency histogram per gRPC method, filled by a server interceptor, so every
// service is measured the same way without code in each handler.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/support/server_interceptor.h>

#include "server/metrics/histogram.h"

namespace kiln::server {

class RpcLatency {
 public:
  void Observe(const std::string& method, double seconds);
  std::map<std::string, HistogramSnapshot> Snapshot() const;

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators; `this` must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> InterceptorFactory();

 private:
  // Method names come from clients: past this many, calls count under "other", so a client
  // naming made-up methods cannot grow the series without bound.
  static constexpr size_t kMaxMethods = 64;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Histogram>> by_method_;
};

}  // namespace kiln::server
