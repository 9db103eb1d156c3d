// What the op generators share beyond their params (kernels/jit/op_params.h): the element
// types the library knows, the vector width rule, the family's compilation unit read from the
// tree, and the rendered config header. Messages name the op, the param, the value and what is
// allowed, as every generator's do.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/jit/jit_spec.h"
#include "kernels/jit/kernel_tree.h"
#include "kernels/jit/op_params.h"

namespace kiln::kernels {

// An element type as a generator sees it: the param value, the device type the config names
// (kiln/common/numeric.cuh) and its size.
struct DTypeInfo {
  const char* name;
  const char* cuda_type;
  int bytes;
};
inline constexpr DTypeInfo kFp32Info = {"fp32", "float", 4};
inline constexpr DTypeInfo kFp16Info = {"fp16", "__half", 2};
inline constexpr DTypeInfo kBf16Info = {"bf16", "__nv_bfloat16", 2};

// The names of `table`, for a kChoice ParamInfo.
std::vector<std::string> DTypeNames(std::span<const DTypeInfo> table);
// The entry of `table` named `name` (a checked param value: always there).
const DTypeInfo& FindDType(std::span<const DTypeInfo> table, std::string_view name);

// The vec param every vectorized op has: elements per access, a power of two of at most 16
// bytes (kiln/common/op_contract.h), kAuto by default.
ParamInfo VecParam(std::string help);

// The widest vec for `bytes`-byte elements that divides `divisor` (0: no divisor).
int WidestVec(int bytes, int divisor = 0);

// The vec of a request: the widest when kAuto, else the given one if it fits `bytes` and
// divides `divisor` (named `divisor_name` in the message: "hidden"); INVALID_ARGUMENT
// "<op>: param 'vec' = '8' is not allowed for dtype fp32: vec is a power of two with vec * 4
// bytes <= 16; allowed here: 1, 2, 4 (omit it for 4)" otherwise.
absl::StatusOr<int> ResolveVec(std::string_view op, const ParamValues& values, const DTypeInfo& dtype, int divisor = 0,
                               std::string_view divisor_name = "");

// "_v<vec>" when vec is not the default (so the default specialization keeps the plain URI).
std::string VecSuffix(int vec, int default_vec);

// The compilation unit at `tree_path` (relative to the kernels folder), named by its file
// name; FAILED_PRECONDITION "<op>: the kernels tree is incomplete: ..." when it is missing.
absl::StatusOr<SourceFile> UnitFromTree(std::string_view op, const TreeSnapshot& tree, std::string_view tree_path);

// The rendered kiln_config.cuh of the spec `uri` of `op`: a header comment naming
// `generator_file`, then one #define per pair, in order.
SourceFile ConfigHeader(std::string_view op, std::string_view uri, std::string_view generator_file,
                        const std::vector<std::pair<std::string, std::string>>& defines);

}  // namespace kiln::kernels
