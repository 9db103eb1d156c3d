#include "server/metrics/rpc_latency.h"

#include <chrono>

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;
using grpc::experimental::InterceptionHookPoints;

// Created when a call starts; observes when its status is about to be sent (every call sends
// one, whether it succeeded or not).
class LatencyInterceptor : public grpc::experimental::Interceptor {
 public:
  LatencyInterceptor(RpcLatency* latency, std::string method)
      : latency_(latency), method_(std::move(method)), started_(Clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS))
      latency_->Observe(method_, std::chrono::duration<double>(Clock::now() - started_).count());
    methods->Proceed();
  }

 private:
  RpcLatency* latency_;
  std::string method_;
  Clock::time_point started_;
};

class LatencyInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit LatencyInterceptorFactory(RpcLatency* latency) : latency_(latency) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    // "/kiln.v1.CacheService/GetStats" → "kiln.v1.CacheService/GetStats".
    std::string method = info->method() != nullptr ? info->method() : "";
    if (!method.empty() && method[0] == '/') method.erase(0, 1);
    return new LatencyInterceptor(latency_, std::move(method));
  }

 private:
  RpcLatency* latency_;
};

}  // namespace

void RpcLatency::Observe(const std::string& method, double seconds) {
  Histogram* h = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_method_.find(method);
    if (it == by_method_.end()) {
      const std::string& name = by_method_.size() < kMaxMethods ? method : "other";
      it = by_method_.find(name);
      if (it == by_method_.end()) it = by_method_.emplace(name, std::make_unique<Histogram>(RpcSecondsBuckets())).first;
    }
    h = it->second.get();  // never removed: safe to use after the lock
  }
  h->Observe(seconds);
}

std::map<std::string, HistogramSnapshot> RpcLatency::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, HistogramSnapshot> out;
  for (const auto& [method, h] : by_method_) out[method] = h->Snapshot();
  return out;
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RpcLatency::InterceptorFactory() {
  return std::make_unique<LatencyInterceptorFactory>(this);
}

}  // namespace kiln::server
