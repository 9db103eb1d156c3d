#include "client/core/rpc/kernel_rpc.h"

#include <grpcpp/grpcpp.h>

#include "client/core/rpc/client_counters.h"
#include "kiln/v1/kernel.grpc.pb.h"

namespace kiln::client {

std::string DescribeRequest(const v1::GetKernelRequest& request) {
  std::string s;
  if (request.has_op()) {
    // Sorted, so the text is the same for equal requests.
    std::map<std::string, std::string> params(request.op().params().begin(), request.op().params().end());
    s = "op " + request.op().name() + " {";
    bool first = true;
    for (const auto& [k, v] : params) {
      s += (first ? "" : ", ") + k + "=" + v;
      first = false;
    }
    s += "}";
  } else if (request.has_source()) {
    s = "source '" + request.source().name() + "'";
  } else {
    s = "an empty request";
  }
  return request.target().arch().empty() ? s : s + " for " + request.target().arch();
}

StatusOr<v1::GetKernelResponse> CallGetKernel(const DaemonConnection& connection, const v1::GetKernelRequest& request,
                                              std::chrono::milliseconds timeout) {
  auto stub = v1::KernelService::NewStub(connection.channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::GetKernelResponse reply;
  Bump(Counters().get_kernel_rpcs);
  grpc::Status status = stub->GetKernel(&context, request, &reply);
  if (!status.ok()) {
    Bump(Counters().rpc_failures);
    return connection.Explain(status, "GetKernel " + DescribeRequest(request));
  }
  return reply;
}

}  // namespace kiln::client
