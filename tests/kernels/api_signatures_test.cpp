// The header reader behind the trace consistency test: declarations (not calls, not
// comments) with their parameters, scopes, and the members of options structs.
#include "tests/kernels/api_signatures.h"

#include <catch2/catch.hpp>

namespace kiln::testing {
namespace {

const std::vector<std::pair<std::string, std::string>> kHeaders = {
    {"a.h", R"(
namespace kiln::ops {
// KILN_API Status rms_norm(const TensorView& wrong);   a comment is no declaration
inline Status helper(const TensorView& x) { return rms_norm(x, x, x, 1e-6); }
struct Scaling { double factor = 8.0; int64_t original = 8192; };
struct Options {
  double theta = 1e4;  // a comment
  std::optional<Scaling> scaling;
  bool Valid() const { return theta > 0; }
  int rotary{0};
  double lo = 0, hi = 1;
};
KILN_API Status rms_norm(const TensorView& out, const TensorView& input,
                         const TensorView& weight, double eps, void* stream = nullptr);
KILN_API Status with_options(const TensorView& q, const Options& options, void* stream = nullptr);
}  // namespace kiln::ops
)"},
    {"c.h", R"(
#pragma once
#include "kiln/status.h"

namespace kiln::client::diag {
struct Stats { int64_t count = 0; double min = 0, max = 0, mean = 0; };
StatusOr<Stats> ComputeStats(const TensorView& t, void* stream);
inline const std::map<std::string, int>& Table();
}
)"},
    {"b.h", R"(
namespace kiln::comm {
class KILN_API Communicator {
 public:
  Status AllReduce(const TensorView& out, const TensorView& in, void* stream = nullptr,
                   AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto);
};
}
typedef struct kiln_scaling { double factor; /* > 0 */ int64_t original; } kiln_scaling;
KILN_API kiln_status kiln_rms_norm(DLTensor* out, const DLTensor* input, const DLTensor* weight,
                                   double eps, void* stream);
)"},
};

std::vector<std::string> Names(const std::vector<ApiParam>& params) {
  std::vector<std::string> out;
  for (const auto& p : params) out.push_back(p.name);
  return out;
}

TEST_CASE("api signatures: a declaration's parameters, not a call's or a comment's", "[traces]") {
  const ApiSignature cpp = FindDeclaration(kHeaders, "kiln::ops::rms_norm");
  CHECK(cpp.file == "a.h");
  CHECK(Names(cpp.params) == std::vector<std::string>{"out", "input", "weight", "eps", "stream"});
  CHECK(cpp.params[0].type == "const TensorView&");
  CHECK(cpp.params[3].type == "double");
  CHECK(cpp.params[4].type == "void*");

  const ApiSignature c = FindDeclaration(kHeaders, "kiln_rms_norm");
  CHECK(c.file == "b.h");
  CHECK(c.params[0].type == "DLTensor*");
  CHECK(c.params[1].type == "const DLTensor*");

  const ApiSignature method = FindDeclaration(kHeaders, "kiln::comm::Communicator::AllReduce");
  CHECK(method.file == "b.h");
  CHECK(Names(method.params) == std::vector<std::string>{"out", "in", "stream", "algorithm"});

  CHECK(cpp.return_type == "Status");
  CHECK(c.return_type == "kiln_status");
  CHECK(method.return_type == "Status");  // after "public:"
  const ApiSignature internal = FindDeclaration(kHeaders, "kiln::client::diag::ComputeStats");
  CHECK(internal.file == "c.h");
  CHECK(internal.return_type == "StatusOr<Stats>");  // after #include lines and a struct
  CHECK(Names(internal.params) == std::vector<std::string>{"t", "stream"});
  CHECK(FindDeclaration(kHeaders, "kiln::client::diag::Table").return_type == "const std::map<std::string, int>&");

  CHECK(FindDeclaration(kHeaders, "kiln::ops::missing").file.empty());
  CHECK(FindDeclaration(kHeaders, "kiln::other::rms_norm").file.empty());  // no such namespace
}

TEST_CASE("api signatures: the members of options structs, C and C++", "[traces]") {
  CHECK(Names(StructFields(kHeaders, "const Options&")) ==
        std::vector<std::string>{"theta", "scaling", "rotary", "lo", "hi"});
  // Each name of a multi-declarator member has the member's type.
  const std::vector<ApiParam> stats = StructFields(kHeaders, "Stats");
  CHECK(Names(stats) == std::vector<std::string>{"count", "min", "max", "mean"});
  REQUIRE(stats.size() == 4);
  CHECK(stats[0].type == "int64_t");
  CHECK(stats[2].type == "double");
  CHECK(stats[3].type == "double");
  CHECK(Names(StructFields(kHeaders, "std::optional<Scaling>")) == std::vector<std::string>{"factor", "original"});
  CHECK(Names(StructFields(kHeaders, "const kiln_scaling*")) == std::vector<std::string>{"factor", "original"});
  CHECK(StructFields(kHeaders, "double").empty());
}

TEST_CASE("api signatures: parameter lists with defaults, templates and no names", "[traces]") {
  const auto p = ParseParams("const std::map<int, int>& m, int x = f(1, 2), void*");
  REQUIRE(p.size() == 3);
  CHECK(p[0].type == "const std::map<int, int>&");
  CHECK(p[0].name == "m");
  CHECK(p[1].name == "x");
  CHECK(p[2].type == "void*");
  CHECK(p[2].name.empty());
  CHECK(ParseParams("void").empty());
  CHECK(ParseParams("").empty());
}

}  // namespace
}  // namespace kiln::testing
