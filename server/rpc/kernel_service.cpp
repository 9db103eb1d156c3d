#include "server/rpc/kernel_service.h"

#include "server/rpc/wire_forms.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/jit/op_generator.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/op_catalog.h"
#include "server/rpc/request_limits.h"

namespace kiln::server {

absl::StatusOr<KernelQuery> QueryFromRequest(const v1::GetKernelRequest& request, const std::string& peer) {
  // First: every check after this one (the op registry, the raw-source policy) may quote a field.
  if (std::string problem = RequestLengthProblem(request); !problem.empty()) return absl::InvalidArgumentError(problem);
  KernelQuery q;
  switch (request.what_case()) {
    case v1::GetKernelRequest::kOp:
      if (request.op().name().empty())
        return absl::InvalidArgumentError("op.name is empty; name an op of the library, e.g. \"rmsnorm\"");
      q.op = request.op().name();
      q.params = kernels::Params(request.op().params().begin(), request.op().params().end());
      break;
    case v1::GetKernelRequest::kSource: {
      const auto& s = request.source();
      q.is_source = true;
      q.source.name = s.name();
      q.source.code = s.code();
      q.source.entries.assign(s.entries().begin(), s.entries().end());
      q.source.options.assign(s.options().begin(), s.options().end());
      for (const auto& u : s.extra_units()) q.source.extra_units.push_back({u.name(), u.code()});
      break;
    }
    default:
      return absl::InvalidArgumentError(
          "the request names no kernel: set \"op\" ({\"name\": \"rmsnorm\", \"params\": {...}}) or \"source\" "
          "({\"name\", \"code\", \"entries\"})");
  }
  q.target_arch = request.target().arch();
  q.lineinfo = request.debug().lineinfo();
  q.device_debug = request.debug().device_debug();
  q.verbose_log = request.debug().verbose_log();
  q.client = request.client_id().empty() ? peer : absl::StrCat(request.client_id(), " (", peer, ")");
  return q;
}

grpc::Status KernelServiceImpl::GetKernel(grpc::ServerContext* context, const v1::GetKernelRequest* request,
                                          v1::GetKernelResponse* response) {
  auto query = QueryFromRequest(*request, context->peer());
  if (!query.ok()) return ToGrpc(query.status());

  // The caller's deadline, on the steady clock the engine waits with.
  auto deadline = Clock::time_point::max();
  if (context->deadline() != std::chrono::system_clock::time_point::max()) {
    auto left = context->deadline() - std::chrono::system_clock::now();
    deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
  }
  auto served = engine_->GetKernel(*query, deadline, [context] { return context->IsCancelled(); });
  if (!served.ok()) return ToGrpc(served.status());

  const Artifact& a = *served->artifact;
  // Only a client on this node (unix socket) can open the blob; others get the bytes. So does a
  // client whose blob was removed under the daemon (the memory cache still has its bytes).
  // kilnd hands its unix socket's connections to gRPC by descriptor ("fd:N", unix_listener.h);
  // TCP connections are "ipv4:"/"ipv6:".
  bool local = absl::StartsWith(context->peer(), "unix:") || absl::StartsWith(context->peer(), "fd:");
  if (request->prefer_blob_path() && local && !a.blob_path.empty() && ::access(a.blob_path.c_str(), R_OK) == 0) {
    response->set_blob_path(a.blob_path);
  } else {
    response->set_cubin(*a.cubin);
  }
  response->set_cubin_size(a.cubin->size());
  response->set_sha256(a.sha256);
  response->set_cache_key(a.key);
  response->set_uri(a.uri);
  response->set_arch(a.arch);
  for (const auto& k : a.kernels) ToWire(k, response->add_kernels());
  response->set_origin(served->origin);
  response->set_job_id(served->job_id);
  *response->mutable_timings() = served->timings;
  ToWire(a.launch, response->mutable_launch());
  for (const auto& [k, v] : a.params) (*response->mutable_params())[k] = v;
  return grpc::Status::OK;
}

grpc::Status KernelServiceImpl::ListOps(grpc::ServerContext*, const v1::ListOpsRequest* request,
                                        v1::ListOpsResponse* response) {
  if (std::string problem = RequestLengthProblem(*request); !problem.empty())
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, problem);
  auto listed = server::ListOps(kernels::OpRegistry::Builtin(), engine_->options().kernels_dir, request->name());
  if (!listed.ok()) return ToGrpc(listed.status());
  *response = *std::move(listed);
  return grpc::Status::OK;
}

}  // namespace kiln::server
