// The generated-sources workspace: one folder per URI holding the exact sources of a spec,
// for people (inspect, compile errors) and tools. Nothing here is read back by the compile.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kernels/jit/jit_spec.h"

namespace kiln::kernels {

// Writes each header and unit of `spec` into <gen_dir>/<uri>/, each file only when its
// content differs from what is there (so timestamps stay honest for tools that watch them),
// via temp file + rename. Returns the folder. Creates <gen_dir> (0755) when missing.
absl::StatusOr<std::string> MaterializeSpec(const JitSpec& spec, const std::string& gen_dir);

// Writes `content` to `path` only when it differs; returns whether it wrote.
absl::StatusOr<bool> WriteIfDifferent(const std::string& path, const std::string& content);

}  // namespace kiln::kernels
