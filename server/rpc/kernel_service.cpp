#include "server/rpc/kernel_service.h"

#include <unistd.h>

#include "kernels/jit/op_generator.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/kernel_wire.h"
#include "server/rpc/op_catalog.h"
#include "server/rpc/path_redaction.h"
#include "server/rpc/request_limits.h"

namespace kiln::server {

grpc::Status KernelServiceImpl::GetKernel(grpc::ServerContext* context, const v1::GetKernelRequest* request,
                                          v1::GetKernelResponse* response) {
  // The caller's deadline, on the steady clock the engine waits with.
  auto deadline = Clock::time_point::max();
  if (context->deadline() != std::chrono::system_clock::time_point::max()) {
    auto left = context->deadline() - std::chrono::system_clock::now();
    deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
  }
  // kilnd hands its unix socket's connections to gRPC by descriptor ("fd:N", unix_listener.h);
  // TCP connections are "ipv4:"/"ipv6:".
  const std::string peer = context->peer();
  return ToGrpc(Serve(
      *request, peer, IsLocalPeer(peer), deadline, [context] { return context->IsCancelled(); }, response));
}

absl::StatusOr<KernelServiceImpl::Resolved> KernelServiceImpl::Resolve(const v1::GetKernelRequest& request,
                                                                       const std::string& peer, bool local,
                                                                       Clock::time_point deadline,
                                                                       const std::function<bool()>& cancelled) {
  auto query = QueryFromRequest(request, peer);
  if (!query.ok()) return query.status();
  auto served = engine_->GetKernel(*query, deadline, cancelled);
  if (!served.ok()) return served.status();
  Resolved resolved{*std::move(served)};
  const Artifact& a = *resolved.served.artifact;
  // Only a client on this node (unix socket) can open the blob; others get the bytes. So does a
  // client whose blob was removed under the daemon (the memory cache still has its bytes).
  resolved.blob_path = request.prefer_blob_path() && local && !a.blob_path.empty() &&
                       ::access(a.blob_path.c_str(), R_OK) == 0;
  return resolved;
}

absl::Status KernelServiceImpl::Serve(const v1::GetKernelRequest& request, const std::string& peer, bool local,
                                      Clock::time_point deadline, const std::function<bool()>& cancelled,
                                      v1::GetKernelResponse* response) {
  auto resolved = Resolve(request, peer, local, deadline, cancelled);
  if (!resolved.ok()) return resolved.status();
  const Artifact& a = *resolved->served.artifact;
  if (resolved->blob_path) {
    response->set_blob_path(a.blob_path);
  } else {
    response->set_cubin(*a.cubin);
  }
  FillKernelReply(resolved->served, response);
  return absl::OkStatus();
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
