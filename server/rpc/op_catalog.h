// The ListOps reply: every op of the registry as its generator states it (params, arch
// families) with its trace definition, read from the daemon's kernels folder.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/jit/op_generator.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::server {

// Every op of `registry` sorted by name, or only `name` (NOT_FOUND listing the known ones when
// the registry has no such op). Each op's trace_definition is `<kernels_dir>/traces/<op>.json`
// as read now (an edit is seen by the next call); empty when there is none, as in a kernels
// folder installed without traces. Nothing else fails.
absl::StatusOr<v1::ListOpsResponse> ListOps(const kernels::OpRegistry& registry, const std::string& kernels_dir,
                                            std::string_view name);

void ToWire(const kernels::ParamInfo& info, v1::ParamSpec* out);

}  // namespace kiln::server
