// The policy for raw-source requests: what a client may send, checked before any compile.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/jit/jit_spec.h"
#include "kernels/jit/kernel_tree.h"

namespace kiln::kernels {

struct RawSourceUnit {
  std::string name;  // file name of an extra unit: [A-Za-z0-9_][A-Za-z0-9_.-]{0,63}, ends in .cu
  std::string code;
};

struct RawSource {
  std::string name;  // [A-Za-z0-9_]{1,64}; the main unit is "<name>.cu"
  std::string code;
  std::vector<std::string> entries;  // C identifiers (extern "C" kernels), at least one
  std::vector<std::string> options;  // from the allow-list below
  std::vector<RawSourceUnit> extra_units;
};

inline constexpr size_t kMaxRawSourceBytes = 1 << 20;  // all units together
inline constexpr size_t kMaxRawSourceEntries = 64;
inline constexpr size_t kMaxRawSourceUnits = 16;  // main unit included
inline constexpr size_t kMaxRawSourceOptions = 64;

// Validates and turns a raw source into a spec with URI "src_<name>_<12 hex>", the hex being
// the start of a SHA-256 over name, every unit (name and code), options and entries.
// INVALID_ARGUMENT, naming what was wrong and what is allowed, for:
//  - empty code or all units over kMaxRawSourceBytes; a bad name, entry or unit name;
//  - several options in one string: a word after whitespace that starts with '-' (e.g.
//    "-DN=1 -I/etc"; each option is its own string; -DFOO=a b stays a macro value);
//  - an option outside the allow-list: -D<macro>[=value], -U<macro>, -std=c++17|c++20,
//    --use_fast_math, -ftz/-prec-div/-prec-sqrt/-fmad=true|false, -maxrregcount=N
//    (16..255), --extra-device-vectorization, -default-device, -lineinfo (each also with
//    the other dash form, e.g. -use_fast_math / --ftz=true);
//  - an #include that is not a literal "path" or <path> naming a file of the kernels
//    include folder (e.g. "kiln/common/vec.cuh") or an existing file under the CUDA include
//    folder or its cccl/ folder (<cuda/std/cstdint>); absolute paths, ".." and macro includes are refused, and so are
//    #include_next, #import, #embed, __has_include_next, and the pragmas that make the compiler read other files
//    (#pragma include_alias, #pragma GCC dependency, also through _Pragma);
//    __has_include operands follow the path rules (relative, no "..").
// The spec compiles for every arch this NVRTC supports (one portable family).
absl::StatusOr<JitSpec> SpecFromRawSource(const RawSource& source, const TreeSnapshot& tree,
                                          const std::string& cuda_include_dir);

}  // namespace kiln::kernels
