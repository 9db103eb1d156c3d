#include "kernels/ops/generator_params.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln::kernels {

bool IsPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

bool ParseBoundedInt(std::string_view text, int lo, int hi, int* value) {
  if (text.empty() || text.size() > 9) return false;  // 9 digits cannot overflow an int
  if (!std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isdigit(c); })) return false;
  int n = 0;
  for (char c : text) n = n * 10 + (c - '0');
  if (n < lo || n > hi) return false;
  *value = n;
  return true;
}

absl::Status CheckKnownParams(const std::string& op, const Params& params,
                              std::initializer_list<std::string_view> known, const std::string& params_are) {
  for (const auto& [key, value] : params) {
    if (std::find(known.begin(), known.end(), key) == known.end())
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": unknown param '", key, "' (= '", value, "'); ", params_are));
  }
  return absl::OkStatus();
}

absl::StatusOr<const DTypeInfo*> RequiredDType(const std::string& op, const Params& params,
                                               std::span<const DTypeInfo> allowed, const char* why) {
  std::string names;
  for (const DTypeInfo& d : allowed) absl::StrAppend(&names, names.empty() ? "" : ", ", d.name);
  auto it = params.find("dtype");
  if (it == params.end())
    return absl::InvalidArgumentError(absl::StrCat(op, ": param 'dtype' is required; allowed: ", names));
  for (const DTypeInfo& d : allowed) {
    if (it->second == d.name) return &d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": param 'dtype' = '", it->second, "' is not allowed; allowed: ", names, why));
}

}  // namespace kiln::kernels
