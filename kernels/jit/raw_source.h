// The policy for raw-source requests: what a client may send, checked before any compile.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/jit/jit_spec.h"
#include "kernels/jit/kernel_tree.h"

namespace kiln::kernels {

struct RawSourceUnit {
  std::string name;
  std::string code;
};

struct RawSource {
  std::string name;  // [A-Za-z0-9_]{1,64}
  std::string code;
  std::vector<std::string> entries;  // C identifiers, at least one
  std::vector<std::string> options;  // from the allow-list below
  std::vector<RawSourceUnit> extra_units;
};

inline constexpr size_t kMaxRawSourceBytes = 1 << 20;  // all units together

// Validates and turns a raw source into a spec with URI "src_<name>_<12 hex of content>".
// INVALID_ARGUMENT, with the reason, for: empty or oversized code, a bad name or entry,
// an option outside the allow-list (-D/-U macros, -std=c++17/20, --use_fast_math,
// -ftz/-prec-div/-prec-sqrt/-fmad=true|false, -maxrregcount=N, --extra-device-vectorization,
// -default-device, -lineinfo), an #include that is not a plain name found in the kernels
// include folder or the CUDA include folder (no absolute paths, no "..", no macros).
absl::StatusOr<JitSpec> SpecFromRawSource(const RawSource& source, const TreeSnapshot& tree,
                                          const std::string& cuda_include_dir);

}  // namespace kiln::kernels
