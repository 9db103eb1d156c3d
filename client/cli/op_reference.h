// How `kiln ops` and `kiln get OP --help` print the daemon's ListOps reply: a table of every
// op, an op reference in Markdown (docs/ops.md is one), and one op's help. Pure functions of
// the reply, so the daemon decides what is listed and this file only how.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/v1/kernel.pb.h"

namespace kiln::cli {

// "hidden (an integer in 1..65536; required)", "vec (a power of two in 1..16, or auto; default
// auto)": the daemon's ParamSummary, from the wire form.
std::string ParamSummaryText(const v1::ParamSpec& param);

// An op's trace definition in a few lines, each a label and its items:
//   axes     rows, hidden
//   inputs   input[rows, hidden] fp32/fp16/bf16, weight[hidden] fp32/fp16/bf16
//   outputs  out[rows, hidden] same as input
//   scalars  eps float64 = 1e-06                     (when it has scalars)
//   returns  TensorStats {count int64, ...}          (when its API returns a struct)
//   api      kiln::ops::rms_norm, kiln_rms_norm       (C++ and C; "internal api": C++ and its header)
// `error` is set instead when the text is not the JSON object the schema describes (a newer
// daemon's, say); nothing is listed then. Both empty: the op has no trace definition.
struct TraceSummary {
  std::vector<std::pair<std::string, std::vector<std::string>>> lines;
  std::string error;
};
TraceSummary SummarizeTrace(const std::string& trace_definition);

// NAME, FAMILY, ARCH and PARAMS, one op a row, then the count.
void PrintOpsTable(std::ostream& out, const v1::ListOpsResponse& ops);

// The op reference: an index by family, then one section per family (sorted), each op with its
// description, a params table (name, allowed, default, meaning), its arch families and its trace
// summary. Deterministic: the same reply prints the same bytes.
void PrintOpsMarkdown(std::ostream& out, const v1::ListOpsResponse& ops);

// `kiln get OP --help`: how to ask for the op, its params, arch families and trace summary.
void PrintOpHelp(std::ostream& out, const v1::OpInfo& op);

}  // namespace kiln::cli
