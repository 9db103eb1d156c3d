#include "server/rpc/health_service.h"

#include <chrono>

#include "proto/input_limits.h"

namespace kiln::server {
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

HealthServiceImpl::HealthServiceImpl()
    : services_{"", "kiln.v1.KernelService", "kiln.v1.CacheService", "kiln.v1.JobService"} {}

HealthServiceImpl::Status HealthServiceImpl::StatusOf(const std::string& service) const {
  if (!services_.count(service)) return HealthCheckResponse::SERVICE_UNKNOWN;
  std::lock_guard<std::mutex> lock(mu_);
  return shutting_down_ || !accepting_ ? HealthCheckResponse::NOT_SERVING : HealthCheckResponse::SERVING;
}

grpc::Status HealthServiceImpl::Check(grpc::ServerContext*, const HealthCheckRequest* request,
                                      HealthCheckResponse* response) {
  Status status = StatusOf(request->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN)
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "kilnd has no service " + proto::QuoteInput(request->service()));
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthServiceImpl::Watch(grpc::ServerContext* context, const HealthCheckRequest* request,
                                      grpc::ServerWriter<HealthCheckResponse>* writer) {
  Status last = HealthCheckResponse::UNKNOWN;
  while (!context->IsCancelled()) {
    Status now = StatusOf(request->service());
    if (now != last) {
      HealthCheckResponse response;
      response.set_status(now);
      if (!writer->Write(response)) break;
      last = now;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (shutting_down_) break;
    changed_.wait_for(lock, std::chrono::milliseconds(200));
  }
  return grpc::Status::OK;
}

void HealthServiceImpl::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
  }
  changed_.notify_all();
}

void HealthServiceImpl::SetAccepting(bool accepting) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (accepting_ == accepting) return;
    accepting_ = accepting;
  }
  changed_.notify_all();
}

}  // namespace kiln::server
