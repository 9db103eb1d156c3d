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

// Every field of the reply but the cubin's bytes and blob path, which the caller chooses:
// FillArtifactFields and FillServedFields.
void FillKernelReply(const ServedKernel& served, v1::GetKernelResponse* response);

// The fields the artifact alone decides: its size, checksums, key, URI, arch, kernels' attributes,
// launch hints and params.
void FillArtifactFields(const Artifact& artifact, v1::GetKernelResponse* response);
// The fields of this one serve: origin, job id, timings.
void FillServedFields(const ServedKernel& served, v1::GetKernelResponse* response);

// FillArtifactFields' message serialized, once per artifact (kept in it). The same-node fetch
// sends these bytes followed by the serve's own message (its fields and the cubin or blob path):
// protobuf parses concatenated messages as their merge, and the two share no field, so the
// client reads what FillKernelReply would have built, without the daemon building and
// serializing ~40 kernels' attributes on every request.
const std::string& ArtifactReplyFields(const Artifact& artifact);

}  // namespace kiln::server
