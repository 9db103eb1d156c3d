// One GetKernel call to kilnd, with a deadline, counted, and its failure explained.
#pragma once

#include <chrono>
#include <string>

#include "client/core/rpc/daemon_connection.h"
#include "kiln/status.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::client {

// "op rmsnorm {dtype=bf16, hidden=4096, vec=8} for sm_90" / "source 'axpy' for sm_90a"
// (no " for ..." while the arch is not chosen yet).
std::string DescribeRequest(const v1::GetKernelRequest& request);

// The daemon's reply, or its error as a kiln::Status whose message starts with
// "GetKernel <DescribeRequest>:".
StatusOr<v1::GetKernelResponse> CallGetKernel(const DaemonConnection& connection, const v1::GetKernelRequest& request,
                                              std::chrono::milliseconds timeout);

}  // namespace kiln::client
