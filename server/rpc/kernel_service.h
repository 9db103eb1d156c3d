// kiln.v1.KernelService: GetKernel by op and params or by raw source, for a target arch;
// ListOps, the ops the daemon serves (server/rpc/op_catalog.h).
#pragma once

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

 private:
  KernelEngine* engine_;
};

}  // namespace kiln::server
