// kiln.v1.KernelService: GetKernel by op and params or by raw source, for a target arch;
// ListOps, the ops the daemon serves (server/rpc/op_catalog.h).
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/v1/kernel.grpc.pb.h"
#include "server/engine/kernel_engine.h"

namespace kiln::server {

class KernelServiceImpl final : public v1::KernelService::Service {
 public:
  explicit KernelServiceImpl(KernelEngine* engine) : engine_(engine) {}

  grpc::Status GetKernel(grpc::ServerContext* context, const v1::GetKernelRequest* request,
                         v1::GetKernelResponse* response) override;
  grpc::Status ListOps(grpc::ServerContext* context, const v1::ListOpsRequest* request,
                       v1::ListOpsResponse* response) override;

  // GetKernel apart from its transport, for gRPC and the same-node fetch
  // (server/daemon/local_fetch_server.h): `peer` names the caller in job waiter lists, `local`
  // says whether it may be given a blob path, `cancelled` whether it has gone away.
  struct Resolved {
    ServedKernel served;
    bool blob_path = false;  // reply with the artifact's blob path, not its bytes
  };
  absl::StatusOr<Resolved> Resolve(const v1::GetKernelRequest& request, const std::string& peer, bool local,
                                   std::chrono::steady_clock::time_point deadline,
                                   const std::function<bool()>& cancelled);
  // Resolve, and the reply as a message (kernel_wire.h's FillKernelReply with the cubin's bytes
  // or blob path).
  absl::Status Serve(const v1::GetKernelRequest& request, const std::string& peer, bool local,
                     std::chrono::steady_clock::time_point deadline, const std::function<bool()>& cancelled,
                     v1::GetKernelResponse* response);

 private:
  KernelEngine* engine_;
};

}  // namespace kiln::server
