#include "kernels/jit/op_params.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::kernels {
namespace {

// Decimal digits only (no sign, no spaces), at most 9 of them: an int that cannot overflow.
bool ParseDecimal(std::string_view text, int* value) {
  if (text.empty() || text.size() > 9) return false;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isdigit(c); })) return false;
  int n = 0;
  for (char c : text) n = n * 10 + (c - '0');
  *value = n;
  return true;
}

// The canonical spelling of `value` when the param allows it: a choice as listed, an integer
// without leading zeros ("04096" is 4096, one specialization however it is spelled).
std::optional<std::string> Canonical(const ParamInfo& info, const std::string& value) {
  if (!info.required() && info.default_value == kAuto && value == kAuto) return value;
  const auto listed = [&](const std::string& v) {
    return std::find(info.choices.begin(), info.choices.end(), v) != info.choices.end();
  };
  int n = 0;
  if (info.kind == ParamInfo::Kind::kChoice) {
    if (listed(value)) return value;
    // A set of sizes ("64", "128", "256") takes any decimal spelling of one ("0128").
    if (ParseDecimal(value, &n) && listed(std::to_string(n))) return std::to_string(n);
    return std::nullopt;
  }
  if (!ParseDecimal(value, &n) || n < info.min || n > info.max) return std::nullopt;
  if (info.power_of_two && (n & (n - 1)) != 0) return std::nullopt;
  if (info.even && n % 2 != 0) return std::nullopt;
  return std::to_string(n);
}

}  // namespace

const std::string& ParamValues::Text(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {  // a generator reading a param it did not declare: a bug, not input
    static const std::string kMissing;
    return kMissing;
  }
  return it->second;
}

int ParamValues::Int(std::string_view name) const { return std::atoi(Text(name).c_str()); }

std::string AllowedText(const ParamInfo& info) {
  std::string text;
  if (info.kind == ParamInfo::Kind::kChoice) {
    text = absl::StrJoin(info.choices, ", ");
  } else {
    const char* what = info.power_of_two ? "a power of two" : info.even ? "an even integer" : "an integer";
    text = absl::StrCat(what, " in ", info.min, "..", info.max);
  }
  if (info.default_value == kAuto) absl::StrAppend(&text, ", or ", kAuto);
  return text;
}

std::string ParamSummary(const ParamInfo& info) {
  return absl::StrCat(info.name, " (", AllowedText(info), "; ",
                      info.required() ? "required" : absl::StrCat("default ", info.default_value), ")");
}

absl::StatusOr<ParamValues> ParseParams(std::string_view op, const std::vector<ParamInfo>& infos, const Params& given) {
  for (const auto& [key, value] : given) {
    auto known = std::find_if(infos.begin(), infos.end(), [&](const ParamInfo& i) { return i.name == key; });
    if (known == infos.end()) {
      std::vector<std::string> summaries;
      for (const ParamInfo& i : infos) summaries.push_back(ParamSummary(i));
      return absl::InvalidArgumentError(absl::StrCat(std::string(op), ": unknown param '", key, "' (= '", value,
                                                     "'); params are ",
                                                     summaries.empty() ? "none" : absl::StrJoin(summaries, ", ")));
    }
  }
  std::map<std::string, std::string, std::less<>> values;
  for (const ParamInfo& info : infos) {
    auto it = given.find(info.name);
    if (it == given.end()) {
      if (info.required())
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(op), ": param '", info.name, "' is required; allowed: ", AllowedText(info)));
      values[info.name] = info.default_value;
      continue;
    }
    std::optional<std::string> canonical = Canonical(info, it->second);
    if (!canonical)
      return absl::InvalidArgumentError(absl::StrCat(std::string(op), ": param '", info.name, "' = '", it->second,
                                                     "' is not allowed; allowed: ", AllowedText(info)));
    values[info.name] = *std::move(canonical);
  }
  return ParamValues(std::move(values));
}

}  // namespace kiln::kernels
