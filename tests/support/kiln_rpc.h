// Test-side gRPC helpers: stubs over a daemon's channel and one-line requests.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "kiln/v1/cache.grpc.pb.h"
#include "kiln/v1/job.grpc.pb.h"
#include "kiln/v1/kernel.grpc.pb.h"

namespace kiln::testing {

struct Rpc {
  explicit Rpc(std::shared_ptr<grpc::Channel> channel);
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::KernelService::Stub> kernels;
  std::unique_ptr<v1::CacheService::Stub> cache;
  std::unique_ptr<v1::JobService::Stub> jobs;
};

struct Reply {
  grpc::Status status;
  v1::GetKernelResponse response;
};

v1::GetKernelRequest OpRequest(const std::string& op, const std::map<std::string, std::string>& params,
                               const std::string& arch = "sm_90a");
v1::GetKernelRequest SourceRequest(const std::string& name, const std::string& code,
                                   const std::vector<std::string>& entries,
                                   const std::vector<std::string>& options = {}, const std::string& arch = "sm_90a");

Reply Get(Rpc& rpc, const v1::GetKernelRequest& request, int timeout_s = 120);
v1::CacheStats Stats(Rpc& rpc);
v1::VerifyResponse Verify(Rpc& rpc);
std::vector<v1::Job> Jobs(Rpc& rpc);

// A small valid raw source with one entry, `vadd`, parameterized by N.
std::string VaddSource();

}  // namespace kiln::testing
