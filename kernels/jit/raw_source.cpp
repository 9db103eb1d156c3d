#include "kernels/jit/raw_source.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/jit/digest.h"
#include "kernels/jit/include_scan.h"
#include "kernels/jit/raw_source_checks.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

constexpr const char* kAllowedOptions =
    "-D<macro>[=value], -U<macro>, -std=c++17|c++20, --use_fast_math, -ftz=true|false, "
    "-prec-div=true|false, -prec-sqrt=true|false, -fmad=true|false, -maxrregcount=<16..255>, "
    "--extra-device-vectorization, -default-device, -lineinfo";

bool IsIdentifier(std::string_view s) {
  return !s.empty() && IsIdentifierStart(s.front()) && std::all_of(s.begin(), s.end(), IsIdentifierChar);
}

bool IsSourceName(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), IsIdentifierChar);
}

bool IsUnitName(std::string_view s) {
  if (s.empty() || s.size() > 64 || !s.ends_with(".cu") || s == ".cu") return false;
  if (!IsIdentifierChar(s.front())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsIdentifierChar(c) || c == '.' || c == '-'; });
}

// --- options ----------------------------------------------------------------------------

// Empty when `option` is allowed, else why not. Only spellings NVRTC itself accepts pass
// (its long "--x" form and its documented short form).
std::string CheckOption(const std::string& option) {
  if (option.find_first_of(std::string_view("\n\r\0", 3)) != std::string::npos) {
    return "contains a control character";
  }
  if (!option.starts_with("-")) return "is not an option (options start with '-')";
  // Several options in one string ("-DN=1 -I/etc"): NVRTC takes each string as one argument,
  // so the -I would only be part of N's value, but a string that reads as two options is a
  // client's mistake or an attempt to get one past this check, and a log or a shell replaying
  // it splits it. Refused rather than split: splitting would change what a client meant by a
  // macro value with spaces (-DFOO=a b, allowed), and a refusal tells it what to send.
  constexpr std::string_view kSpace = " \t\v\f";
  for (size_t at = option.find_first_of(kSpace); at != std::string::npos; at = option.find_first_of(kSpace, at)) {
    at = option.find_first_not_of(kSpace, at);
    if (at == std::string::npos) break;
    if (option[at] == '-') {
      std::string_view word = std::string_view(option).substr(at, option.find_first_of(kSpace, at) - at);
      return absl::StrCat("holds more than one option ('", Str(word),
                          "' after a space); send each option as its own string");
    }
  }
  std::string_view macro;
  bool undefine = false;
  if (option.starts_with("--define-macro=")) macro = std::string_view(option).substr(15);
  else if (option.starts_with("--undefine-macro=")) macro = std::string_view(option).substr(17), undefine = true;
  else if (option.starts_with("-D")) macro = std::string_view(option).substr(2);
  else if (option.starts_with("-U")) macro = std::string_view(option).substr(2), undefine = true;
  if (option.starts_with("-D") || option.starts_with("-U") || option.starts_with("--define-macro=") ||
      option.starts_with("--undefine-macro=")) {
    if (macro.empty()) return "must name the macro in the same option (-DNAME[=value])";
    std::string_view name = macro.substr(0, macro.find('='));
    if (undefine && name.size() != macro.size()) return "takes a macro name only";
    if (!IsIdentifier(name)) return absl::StrCat("'", Str(name), "' is not a macro name");
    return "";
  }
  static const std::set<std::string_view> kExact = {"-std=c++17",
                                                    "--std=c++17",
                                                    "-std=c++20",
                                                    "--std=c++20",
                                                    "-use_fast_math",
                                                    "--use_fast_math",
                                                    "-extra-device-vectorization",
                                                    "--extra-device-vectorization",
                                                    "-default-device",
                                                    "--device-as-default-execution-space",
                                                    "-lineinfo",
                                                    "--generate-line-info"};
  if (kExact.count(option) != 0) return "";
  std::string_view body = option;
  body.remove_prefix(body.starts_with("--") ? 2 : 1);
  for (std::string_view flag : {"ftz=", "prec-div=", "prec-sqrt=", "fmad="}) {
    if (!body.starts_with(flag)) continue;
    std::string_view value = body.substr(flag.size());
    if (value == "true" || value == "false") return "";
    return absl::StrCat("takes true or false, not '", Str(value), "'");
  }
  if (body.starts_with("maxrregcount=")) {
    std::string_view digits = body.substr(13);
    int n = 0;
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (error == std::errc() && end == digits.data() + digits.size() && n >= 16 && n <= 255) return "";
    return "takes a register count in 16..255";
  }
  if (body.starts_with("std=")) return "selects a dialect other than c++17 or c++20";
  if (body.starts_with("I") || body.starts_with("include") || body.starts_with("pre-include") ||
      body.starts_with("isystem")) {
    return "changes include paths or pre-includes files; the daemon sets the include paths "
           "(kernels include folder, CUDA headers)";
  }
  if (body.starts_with("gpu-architecture") || body.starts_with("arch")) {
    return "sets the target; the request's arch field chooses it";
  }
  if (body.starts_with("pch") || body.starts_with("create-pch") || body.starts_with("use-pch")) {
    return "controls precompiled headers, which the daemon manages";
  }
  if (body == "G" || body == "device-debug") {
    return "is a debug compile; ask for it with the request's debug switch";
  }
  return "is not on the allow-list";
}

}  // namespace

absl::StatusOr<JitSpec> SpecFromRawSource(const RawSource& source, const TreeSnapshot& tree,
                                          const std::string& cuda_include_dir) {
  if (!IsSourceName(source.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw source name '", source.name, "' is not allowed: use 1 to 64 of [A-Za-z0-9_]"));
  }
  if (source.code.empty()) return InvalidRawSource(source.name, "the code is empty");
  if (source.entries.empty()) {
    return InvalidRawSource(source.name, "no entry named: list the extern \"C\" __global__ functions to export");
  }
  if (source.entries.size() > kMaxRawSourceEntries) {
    return InvalidRawSource(source.name,
                            absl::StrCat(source.entries.size(), " entries; at most ", kMaxRawSourceEntries));
  }
  std::set<std::string_view> entries;
  for (const std::string& entry : source.entries) {
    if (!IsIdentifier(entry) || entry.size() > 128) {
      return InvalidRawSource(source.name, absl::StrCat("entry '", entry,
                                                        "' is not a C identifier of at most 128 characters "
                                                        "(entries are extern \"C\" __global__ names)"));
    }
    if (!entries.insert(entry).second) {
      return InvalidRawSource(source.name, absl::StrCat("entry '", entry, "' is listed twice"));
    }
  }
  if (source.options.size() > kMaxRawSourceOptions) {
    return InvalidRawSource(source.name,
                            absl::StrCat(source.options.size(), " options; at most ", kMaxRawSourceOptions));
  }
  for (const std::string& option : source.options) {
    if (std::string why = CheckOption(option); !why.empty()) {
      return InvalidRawSource(source.name, absl::StrCat("option '", option, "' ", why, "; allowed: ", kAllowedOptions));
    }
  }
  if (source.extra_units.size() + 1 > kMaxRawSourceUnits) {
    return InvalidRawSource(source.name,
                            absl::StrCat(source.extra_units.size() + 1, " units; at most ", kMaxRawSourceUnits));
  }

  JitSpec spec;
  spec.op = "source";
  spec.params = {{"name", source.name}};
  spec.units.push_back({source.name + ".cu", source.code, SourceFile::Origin::kRequest, ""});
  size_t total_bytes = source.code.size();
  for (const RawSourceUnit& unit : source.extra_units) {
    if (!IsUnitName(unit.name)) {
      return InvalidRawSource(source.name, absl::StrCat("unit name '", unit.name,
                                                        "' is not allowed: use [A-Za-z0-9_][A-Za-z0-9_.-]* "
                                                        "ending in .cu, at most 64 characters"));
    }
    for (const SourceFile& other : spec.units) {
      if (other.name == unit.name) {
        return InvalidRawSource(source.name, absl::StrCat("unit name '", unit.name, "' is used twice"));
      }
    }
    if (unit.code.empty()) return InvalidRawSource(source.name, absl::StrCat("unit '", unit.name, "' is empty"));
    total_bytes += unit.code.size();
    spec.units.push_back({unit.name, unit.code, SourceFile::Origin::kRequest, ""});
  }
  if (total_bytes > kMaxRawSourceBytes) {
    return InvalidRawSource(source.name, absl::StrCat("the code is ", total_bytes, " bytes; at most ",
                                                      kMaxRawSourceBytes, " bytes (all units together)"));
  }

  for (const SourceFile& unit : spec.units) {
    KILN_ABSL_RETURN_IF_ERROR(CheckRawSourceIncludes(source.name, unit.name, unit.content, tree, cuda_include_dir));
  }

  Sha256Digest digest;
  digest.UpdateField("kiln.raw_source.v1").UpdateField(source.name);
  digest.UpdateField(std::to_string(spec.units.size()));
  for (const SourceFile& unit : spec.units) digest.UpdateField(unit.name).UpdateField(unit.content);
  digest.UpdateField(std::to_string(source.options.size()));
  for (const std::string& option : source.options) digest.UpdateField(option);
  digest.UpdateField(std::to_string(source.entries.size()));
  for (const std::string& entry : source.entries) digest.UpdateField(entry);
  spec.uri = absl::StrCat("src_", source.name, "_", digest.FinalHex().substr(0, 12));

  spec.nvrtc_options = source.options;
  spec.entries = source.entries;
  const std::vector<int>& supported = SupportedComputeCapabilities();
  spec.arch_families = {FamilyAtLeast(supported.empty() ? 75 : supported.front())};
  // A small kernel takes ~50 MB (rmsnorm_generator.cpp has the measurement); heavy
  // template code takes far more, so raw sources get a conservative base plus about 1 MB per
  // KB of source.
  spec.compile_memory_mb = 512 + static_cast<int64_t>(total_bytes >> 10);
  return spec;
}

}  // namespace kiln::kernels
