// ParamInfo: one param of an op, stated once by its generator. The checks of a request's
// params, their canonical values, the message of a bad request and the `kiln ops` listing all
// come from it (ParseParams, AllowedText, ParamSummary), so no generator writes them by hand;
// a generator checks by hand only what relates two params (vec must divide hidden).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/jit/jit_spec.h"

namespace kiln::kernels {

// The default of a param its generator derives from the others (vec: the widest access).
inline constexpr const char* kAuto = "auto";

struct ParamInfo {
  enum class Kind {
    kChoice,  // one of `choices`, spelled exactly (dtypes, styles, "0"/"1", a set of sizes)
    kInt,     // a decimal integer in [min, max], a power of two or even when asked
  };
  std::string name;
  Kind kind = Kind::kChoice;
  std::string help;                  // what it is, for `kiln ops` and `kiln get OP --help`
  std::vector<std::string> choices;  // kChoice
  int min = 0;                       // kInt
  int max = 0;                       // kInt
  bool power_of_two = false;         // kInt
  bool even = false;                 // kInt
  std::string default_value;         // "": required; kAuto: derived by the generator

  bool required() const { return default_value.empty(); }
};

// The params of one request, checked: every param of the op, given or defaulted, spelled
// canonically (a choice as listed, an integer without leading zeros: "04096" is 4096). The
// generator reads them typed; a param of its ParamInfo list is always there.
class ParamValues {
 public:
  explicit ParamValues(std::map<std::string, std::string, std::less<>> values) : values_(std::move(values)) {}

  const std::string& Text(std::string_view name) const;
  // A kInt param, or a kChoice param whose choices are integers ("64", "128"). Not for kAuto.
  int Int(std::string_view name) const;
  bool IsAuto(std::string_view name) const { return Text(name) == kAuto; }

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

// Checks `given` against `infos`: INVALID_ARGUMENT for an unknown param, a missing required one
// or a value that is not allowed, each naming the op, the param, the value and what is
// allowed:
//   "<op>: unknown param 'x' (= '1'); params are dtype (fp16, bf16; required), vec (...)"
//   "<op>: param 'hidden' is required; allowed: an integer in 1..65536"
//   "<op>: param 'vec' = '3' is not allowed; allowed: a power of two in 1..16, or auto"
absl::StatusOr<ParamValues> ParseParams(std::string_view op, const std::vector<ParamInfo>& infos, const Params& given);

// "fp16, bf16", "an integer in 1..65536", "a power of two in 1..16", "an even integer in 2..512"
// (", or auto" when the default is kAuto).
std::string AllowedText(const ParamInfo& info);
// "hidden (an integer in 1..65536; required)", "vec (a power of two in 1..16, or auto; default auto)".
std::string ParamSummary(const ParamInfo& info);

}  // namespace kiln::kernels
