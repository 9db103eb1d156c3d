// ApiSignature: a function of the client's public headers as the headers declare it — the
// machine-readable description of the op APIs that the trace definitions are checked
// against. The headers are the contract users compile with, so reading them (comments
// stripped, parameters split at top-level commas) checks the definitions against the truth
// rather than against a copy that could drift.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::testing {

struct ApiParam {
  std::string type;  // "const TensorView&", "DLTensor*", "double", "void*"
  std::string name;
};

struct ApiSignature {
  std::string file;  // the header it was found in
  std::vector<ApiParam> params;
  // As declared, without specifiers (KILN_API, inline, static, virtual, constexpr, explicit)
  // and with whitespace collapsed: "Status", "StatusOr<TensorStats>", "kiln_status".
  std::string return_type;
};

// The text of `code` with // and /* */ comments replaced by spaces.
std::string StripComments(std::string_view code);

// The parameters of the function declared as `qualified` ("kiln::ops::rms_norm",
// "kiln::comm::Communicator::AllReduce"; a C name such as "kiln_rms_norm" has no "::") in
// one of `headers` (path, text). A C++ name's scopes must each be declared in that header
// (namespace or class/struct); the first declaration (not a call: preceded by a return
// type, followed by ';' or a body) wins. Empty file when none is found.
ApiSignature FindDeclaration(const std::vector<std::pair<std::string, std::string>>& headers,
                             std::string_view qualified);

// The data members of the struct named by `type` (each name of a multi-declarator member,
// "double min = 0, max = 0;", with the member's type) ("const RopeOptions&",
// "const kiln_llama31_rope_scaling*", "std::optional<Llama31RopeScaling>": qualifiers,
// pointers, references and std::optional are looked through) as one of `headers` defines it
// (struct X {...}; or typedef struct ... {...} X;). Empty when it is no struct defined there.
std::vector<ApiParam> StructFields(const std::vector<std::pair<std::string, std::string>>& headers,
                                   std::string_view type);

// Splits "const TensorView& out, double eps = 1e-6, void* stream = nullptr" into params
// (defaults dropped); "void" or "" is no params.
std::vector<ApiParam> ParseParams(std::string_view text);

}  // namespace kiln::testing
