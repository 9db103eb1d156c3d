#include "server/rpc/kernel_wire.h"

#include "absl/strings/str_cat.h"
#include "server/rpc/request_limits.h"
#include "server/rpc/wire_forms.h"

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

void FillArtifactFields(const Artifact& a, v1::GetKernelResponse* response) {
  response->set_cubin_size(a.cubin->size());
  response->set_sha256(a.sha256);
  response->set_cubin_crc32c(a.crc32c);
  response->set_cache_key(a.key);
  response->set_uri(a.uri);
  response->set_arch(a.arch);
  for (const auto& k : a.kernels) ToWire(k, response->add_kernels());
  ToWire(a.launch, response->mutable_launch());
  for (const auto& [k, v] : a.params) (*response->mutable_params())[k] = v;
}

void FillServedFields(const ServedKernel& served, v1::GetKernelResponse* response) {
  response->set_origin(served.origin);
  response->set_job_id(served.job_id);
  *response->mutable_timings() = served.timings;
}

void FillKernelReply(const ServedKernel& served, v1::GetKernelResponse* response) {
  FillArtifactFields(*served.artifact, response);
  FillServedFields(served, response);
}

const std::string& ArtifactReplyFields(const Artifact& artifact) {
  // An artifact is complete before it is served (the engine fills it, then shares it as const).
  std::call_once(artifact.reply_fields_once, [&artifact] {
    v1::GetKernelResponse fields;
    FillArtifactFields(artifact, &fields);
    artifact.reply_fields = fields.SerializeAsString();
  });
  return artifact.reply_fields;
}

}  // namespace kiln::server
