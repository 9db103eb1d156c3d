// The constraint expressions of trace definitions ("d2 == 2 * d", "head_dim in (64, 128)"):
// a small subset of Python's expression grammar over integer axes, parsed and evaluated here
// so that the consistency test can check every constraint against every example.
//
//   or/and/not, comparisons (chained as in Python: a < b <= c), in / not in (a, b, ...),
//   + - * / // % **, unary + -, parentheses, integers, True/False, axis names, and the
//   functions min, max, abs.
//
// Values are doubles (exact for every integer an axis can hold); // and % follow Python's
// floor semantics; a comparison is 1 or 0. Anything else (strings, attributes, other names)
// is INVALID_ARGUMENT naming the expression and the position.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::traces {

// Parses `expression`; every name must be in `names` (or min/max/abs as a call).
absl::Status CheckExpression(std::string_view expression, const std::set<std::string>& names);

// Parses and evaluates; every name must be a key of `values`. Division by zero is an error.
absl::StatusOr<double> EvaluateExpression(std::string_view expression, const std::map<std::string, int64_t>& values);

}  // namespace kiln::traces
