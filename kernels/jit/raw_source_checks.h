// What the two halves of the raw-source policy share: raw_source.cpp (names, entries,
// options, sizes) and include_scan.cpp (includes) refuse a request in one spelling and read
// identifiers alike. Internal to kernels/jit.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln::kernels {

// Debian's abseil has its own absl::string_view, which StrCat takes and std::string_view does
// not convert to: the checks pass their std::string_view pieces through this.
inline std::string Str(std::string_view s) { return std::string(s); }

// INVALID_ARGUMENT "raw source '<source_name>': <what>": every refusal of the policy.
inline absl::Status InvalidRawSource(std::string_view source_name, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("raw source '", Str(source_name), "': ", Str(what)));
}

// C identifier characters ([A-Za-z_] first, then [A-Za-z0-9_]).
inline bool IsIdentifierStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
inline bool IsIdentifierChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

}  // namespace kiln::kernels
