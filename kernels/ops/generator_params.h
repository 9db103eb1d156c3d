// What every op generator does with its params before it builds a spec, in one place: the
// element types the library knows, a strict decimal parser, the unknown-param check and the
// dtype lookup. The messages name the op, the param, the value and what is allowed, the way
// docs/adding-a-kernel.md asks of every generator.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/jit/op_generator.h"

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

bool IsPowerOfTwo(int n);

// Decimal digits only (no sign, no spaces, at most 9 digits), value in [lo, hi].
bool ParseBoundedInt(std::string_view text, int lo, int hi, int* value);

// INVALID_ARGUMENT "<op>: unknown param '<key>' (= '<value>'); <params_are>" for the first
// param whose name is not in `known`; OK otherwise.
absl::Status CheckKnownParams(const std::string& op, const Params& params,
                              std::initializer_list<std::string_view> known, const std::string& params_are);

// The required param `dtype`, one of `allowed` (a static table of the generator):
// "<op>: param 'dtype' is required; allowed: fp16, bf16" when it is missing and
// "<op>: param 'dtype' = '<value>' is not allowed; allowed: fp16, bf16<why>" when it is not
// one of them (`why`, when given, starts with a space: " (the kernel runs on ...)").
absl::StatusOr<const DTypeInfo*> RequiredDType(const std::string& op, const Params& params,
                                               std::span<const DTypeInfo> allowed, const char* why = "");

}  // namespace kiln::kernels
