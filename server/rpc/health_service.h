// grpc.health.v1.Health: SERVING for the server ("") and each Kiln service while kilnd runs,
// NOT_SERVING once shutdown begins, and while kilnd cannot accept connections (its open-file
// limit is reached: server/daemon/unix_listener.h). Watch streams changes until the caller or kilnd leaves.
#pragma once

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"

namespace kiln::server {

class HealthServiceImpl final : public grpc::health::v1::Health::Service {
 public:
  HealthServiceImpl();

  grpc::Status Check(grpc::ServerContext* context, const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context, const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

  // Every service turns NOT_SERVING and watchers are told, then their streams end.
  void Shutdown();
  // False while new connections are refused for want of file descriptors; true again once one
  // can be accepted.
  void SetAccepting(bool accepting);

 private:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  Status StatusOf(const std::string& service) const;  // SERVICE_UNKNOWN for others

  const std::set<std::string> services_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  bool shutting_down_ = false;
  bool accepting_ = true;
};

}  // namespace kiln::server
