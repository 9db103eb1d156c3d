#include "tests/support/kiln_rpc.h"

#include <chrono>
#include <stdexcept>

namespace kiln::testing {

Rpc::Rpc(std::shared_ptr<grpc::Channel> ch)
    : channel(std::move(ch)),
      kernels(v1::KernelService::NewStub(channel)),
      cache(v1::CacheService::NewStub(channel)),
      jobs(v1::JobService::NewStub(channel)) {}

v1::GetKernelRequest OpRequest(const std::string& op, const std::map<std::string, std::string>& params,
                               const std::string& arch) {
  v1::GetKernelRequest r;
  r.mutable_op()->set_name(op);
  for (const auto& [k, v] : params) (*r.mutable_op()->mutable_params())[k] = v;
  r.mutable_target()->set_arch(arch);
  r.set_client_id("kiln-test");
  return r;
}

v1::GetKernelRequest SourceRequest(const std::string& name, const std::string& code,
                                   const std::vector<std::string>& entries, const std::vector<std::string>& options,
                                   const std::string& arch) {
  v1::GetKernelRequest r;
  auto* s = r.mutable_source();
  s->set_name(name);
  s->set_code(code);
  for (const auto& e : entries) s->add_entries(e);
  for (const auto& o : options) s->add_options(o);
  r.mutable_target()->set_arch(arch);
  r.set_client_id("kiln-test");
  return r;
}

namespace {
std::unique_ptr<grpc::ClientContext> Context(int timeout_s) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_s));
  return ctx;
}
void Check(const grpc::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + " failed: " + s.error_message());
}
}  // namespace

Reply Get(Rpc& rpc, const v1::GetKernelRequest& request, int timeout_s) {
  Reply reply;
  auto ctx = Context(timeout_s);
  reply.status = rpc.kernels->GetKernel(ctx.get(), request, &reply.response);
  return reply;
}

v1::CacheStats Stats(Rpc& rpc) {
  v1::CacheStats out;
  auto ctx = Context(30);
  Check(rpc.cache->GetStats(ctx.get(), v1::GetStatsRequest(), &out), "GetStats");
  return out;
}

v1::VerifyResponse Verify(Rpc& rpc) {
  v1::VerifyResponse out;
  auto ctx = Context(120);
  Check(rpc.cache->Verify(ctx.get(), v1::VerifyRequest(), &out), "Verify");
  return out;
}

std::vector<v1::Job> Jobs(Rpc& rpc) {
  v1::ListJobsResponse out;
  v1::ListJobsRequest req;
  req.set_limit(10000);
  auto ctx = Context(30);
  Check(rpc.jobs->ListJobs(ctx.get(), req, &out), "ListJobs");
  return {out.jobs().begin(), out.jobs().end()};
}

std::string VaddSource() {
  return R"(#ifndef N
#define N 1
#endif
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i] * N;
}
)";
}

}  // namespace kiln::testing
