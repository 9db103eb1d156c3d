// BenchCase and the test-list format of kiln-bench: one case per line,
//
//   # routine           dtype  shape                      backends         [label]
//   rmsnorm             bf16   rows=2048,hidden=4096      kiln,reference   llama3.1-8b-prefill-2048
//
// whitespace-separated columns, '#' starts a comment, blank lines are ignored. `backends` is a
// comma list or "all" (every backend the routine has). The label is free text without
// spaces (the trace example's name in the generated default list).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/status.h"

namespace kiln::bench {

// Axis values in the order given: {{"rows", 2048}, {"hidden", 4096}}.
using ShapeAxes = std::vector<std::pair<std::string, int64_t>>;

struct BenchCase {
  std::string routine;
  std::string dtype;
  ShapeAxes shape;
  std::vector<std::string> backends;
  std::string label;
  std::string origin;  // "default.list:12", or "command line", for messages
};

// "rows=2048,hidden=4096": names are identifiers, values positive integers, no name twice.
StatusOr<ShapeAxes> ParseShape(std::string_view text);
std::string FormatShape(const ShapeAxes& shape);  // the inverse: "rows=2048,hidden=4096"

// "kiln,reference": non-empty names of [A-Za-z0-9_.-], none twice. `what` names the list in
// messages ("--backends").
StatusOr<std::vector<std::string>> ParseNameList(std::string_view text, std::string_view what);

// The value of `axis`, or -1 when the shape lacks it.
int64_t AxisValue(const ShapeAxes& shape, std::string_view axis);

// Every case of a test list; INVALID_ARGUMENT "<file>:<line>: ..." on the first bad line.
StatusOr<std::vector<BenchCase>> ParseTestList(std::string_view text, std::string_view file_name);

// One line of the format above (columns padded for reading; no trailing newline).
std::string FormatCase(const BenchCase& c);

}  // namespace kiln::bench
