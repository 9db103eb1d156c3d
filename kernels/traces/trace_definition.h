// TraceDefinition: one kernels/traces/<op>.json read and checked against the schema of
// kernels/traces/README.md — what an op computes, on which axes, tensors and dtypes, how to
// call it, its reference, and realistic example shapes. Everything here is checked from the
// file alone; what needs the rest of the tree (the registry, the API headers, the reference
// source) is checked by tests/kernels/trace_definitions_test.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::traces {

struct TraceAxis {
  std::string name;
  bool is_const = false;
  int64_t value = 0;  // const axes only
};

// One entry of a shape: an axis name, or a literal size when `axis` is empty.
struct TraceDim {
  std::string axis;
  int64_t size = 0;
};

struct TraceTensor {
  std::string name;  // the argument name in the C++ and C APIs
  std::vector<TraceDim> shape;
  std::vector<std::string> dtypes;  // allowed dtypes; empty when same_as is set
  std::string same_as;              // "input" for "same_as:input"
  bool dtype_is_list = false;       // written as a list: the op's dtype (not a fixed one)
  bool optional = false;            // inputs: the API takes a null pointer for it (gemm's bias)
};

struct TraceScalar {
  std::string name;
  std::string dtype;
  double default_value = 0;
  bool has_default = false;
};

// What an API returns instead of writing tensors (an internal diagnostics API returns a struct
// of counts and values): the C++ struct's name and its members with their scalar dtypes.
struct TraceReturn {
  std::string type;                                         // "TensorStats"
  std::vector<std::pair<std::string, std::string>> fields;  // {"count", "int64"}, in file order
};

struct TraceExample {
  std::string name;
  std::vector<std::pair<std::string, int64_t>> axes;  // in the order of the definition's axes
  std::string dtype;
};

struct TraceDefinition {
  std::string file;  // the file name it came from ("rmsnorm.json"), for messages
  std::string name;
  std::string op_type;
  std::string description;
  std::string api_cpp;  // "kiln::ops::rms_norm"
  std::string api_c;    // "kiln_rms_norm"; empty for an internal op
  // An internal op (no public API, no C ABI: diagnostics): the header, from the repository
  // root, that declares api_cpp ("client/diag/tensor_stats.h"). Empty for a public op.
  std::string api_internal_header;
  std::vector<TraceAxis> axes;
  std::vector<TraceTensor> inputs;
  std::vector<TraceTensor> outputs;
  std::vector<TraceScalar> scalars;
  std::vector<std::string> constraints;
  std::vector<std::string> tags;
  std::string reference_torch;
  std::string reference_cpp;  // "<file>:<function>"
  TraceReturn returns;        // type empty: the API returns only a status
  std::vector<TraceExample> examples;
  std::string no_examples;  // why an internal op has no examples (and so no benchmark cases)
  // A composed op (fused_moe): an op of the client library with no generator of its own, whose
  // launches are the kernels of these registered ops. Empty for an op with its own generator.
  std::vector<std::string> composed_of;

  const TraceAxis* FindAxis(std::string_view axis) const;
  std::vector<std::string> VarAxes() const;  // in definition order
  // The dtypes the op takes: the union of the list-valued input dtypes, in first-seen order.
  std::vector<std::string> OpDtypes() const;
  bool HasTag(std::string_view tag) const;
  bool IsInternal() const { return !api_internal_header.empty(); }
  // Every axis value of an example, const axes included.
  std::map<std::string, int64_t> AxisValues(const TraceExample& example) const;
};

// The dtype names a definition may use (kiln::DTypeName's vocabulary).
const std::set<std::string>& KnownDtypes();

// INVALID_ARGUMENT "<file>: <where>: <what>" on the first problem: malformed JSON, a missing,
// unknown or mistyped key, an undefined axis, a bad same_as, an example that misses a var
// axis or breaks a constraint, a constraint that does not parse, and so on.
absl::StatusOr<TraceDefinition> ParseTraceDefinition(std::string_view json_text, std::string_view file_name);

// Every *.json in `dir`, sorted by file name; each one's "name" must equal its file stem.
absl::StatusOr<std::vector<TraceDefinition>> LoadTraceDefinitions(const std::string& dir);

}  // namespace kiln::traces
