#include "client/core/rpc/kernel_request.h"

namespace kiln::client {

v1::GetKernelRequest MakeKernelRequest(const OpRequest& op, const std::string& arch, const DebugCompile& debug) {
  v1::GetKernelRequest request;
  request.mutable_op()->set_name(op.name);
  for (const auto& [k, v] : op.params) (*request.mutable_op()->mutable_params())[k] = v;
  request.mutable_target()->set_arch(arch);
  debug.ApplyTo(&request);
  return request;
}

v1::GetKernelRequest MakeKernelRequest(const SourceRequest& source, const std::string& arch,
                                       const DebugCompile& debug) {
  v1::GetKernelRequest request;
  v1::SourceRequest* s = request.mutable_source();
  s->set_name(source.name);
  s->set_code(source.code);
  for (const auto& e : source.entries) s->add_entries(e);
  for (const auto& o : source.options) s->add_options(o);
  for (const auto& u : source.extra_units) {
    v1::SourceUnit* unit = s->add_extra_units();
    unit->set_name(u.name);
    unit->set_code(u.code);
  }
  request.mutable_target()->set_arch(arch);
  debug.ApplyTo(&request);
  return request;
}

v1::GetKernelRequest MakeKernelRequest(const OpRequest& op, const std::string& arch) {
  return MakeKernelRequest(op, arch, ProcessDebugCompile());
}

v1::GetKernelRequest MakeKernelRequest(const SourceRequest& source, const std::string& arch) {
  return MakeKernelRequest(source, arch, ProcessDebugCompile());
}

}  // namespace kiln::client
