// The GetKernel wire forms on both sides of the engine: a request → the engine's query, and a
// served kernel → the reply. kilnd's KernelService and a client's embedded engine
// (client/embedded/) both go through these, so a kernel fetched either way carries the same
// fields.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kiln/v1/kernel.pb.h"
#include "server/engine/kernel_engine.h"

namespace kiln::server {

// Request → engine query, with the checks that belong to the wire format. `peer` names the
// caller in the job's waiter list.
absl::StatusOr<KernelQuery> QueryFromRequest(const v1::GetKernelRequest& request, const std::string& peer);

// Every field of the reply but the cubin's bytes and blob path, which the caller chooses.
void FillKernelReply(const ServedKernel& served, v1::GetKernelResponse* response);

}  // namespace kiln::server
