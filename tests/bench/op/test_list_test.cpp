#include "bench/op/test_list.h"

#include <catch2/catch.hpp>

namespace kiln::bench {
namespace {

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("a test list: cases with comments, blank lines, labels and 'all'", "[bench]") {
  const std::string text = "# header\n"
                           "\n"
                           "rmsnorm  bf16  rows=2048,hidden=4096  kiln,reference  llama3.1-8b-prefill-2048\n"
                           "   fused_add_rmsnorm fp16 rows=1,hidden=8 all   # trailing comment\n";
  auto cases = ParseTestList(text, "x.list");
  INFO(cases.status().ToString());
  REQUIRE(cases.ok());
  REQUIRE(cases->size() == 2);
  const BenchCase& a = (*cases)[0];
  CHECK(a.routine == "rmsnorm");
  CHECK(a.dtype == "bf16");
  CHECK(a.shape == ShapeAxes{{"rows", 2048}, {"hidden", 4096}});
  CHECK(a.backends == std::vector<std::string>{"kiln", "reference"});
  CHECK(a.label == "llama3.1-8b-prefill-2048");
  CHECK(a.origin == "x.list:3");
  const BenchCase& b = (*cases)[1];
  CHECK(b.routine == "fused_add_rmsnorm");
  CHECK(b.backends == std::vector<std::string>{"all"});
  CHECK(b.label.empty());
  CHECK(b.origin == "x.list:4");
}

TEST_CASE("a test list: the first bad line is refused with its file and line", "[bench]") {
  const std::pair<const char*, const char*> cases[] = {
      {"rmsnorm bf16 rows=1,hidden=8", "x.list:2: expected 'routine dtype shape backends [label]', found 3 columns"},
      {"rmsnorm bf16 rows=1,hidden=8 kiln label extra", "found 6 columns"},
      {"rmsnorm bf16 rows=1;hidden=8 kiln",
       "x.list:2: shape 'rows=1;hidden=8': rows='1;hidden=8' is not a positive integer"},
      {"rmsnorm bf16 rows=1,hidden=8 kiln,,reference", "'' is not a name"},
      {"rms-norm bf16 rows=1 kiln", "routine 'rms-norm' is not a name"},
      {"rmsnorm bf16 1rows=1 kiln", "axis name '1rows' is not an identifier"},
  };
  for (const auto& [line, message] : cases) {
    auto parsed = ParseTestList(std::string("# first line\n") + line + "\n", "x.list");
    INFO(line << " -> " << parsed.status().ToString());
    REQUIRE(!parsed.ok());
    CHECK(parsed.status().code() == StatusCode::kInvalidArgument);
    CHECK(Contains(parsed.status().message(), message));
  }
}

TEST_CASE("a formatted case parses back to itself", "[bench]") {
  BenchCase c{"silu_and_mul",           "bf16", {{"rows", 64}, {"d", 14336}, {"d2", 28672}}, {"kiln", "reference"},
              "llama3.1-8b-decode-b64", ""};
  const std::string line = FormatCase(c);
  CHECK(line.find('\n') == std::string::npos);
  auto back = ParseTestList(line, "f");
  REQUIRE(back.ok());
  REQUIRE(back->size() == 1);
  CHECK((*back)[0].routine == c.routine);
  CHECK((*back)[0].shape == c.shape);
  CHECK((*back)[0].backends == c.backends);
  CHECK((*back)[0].label == c.label);
  CHECK(FormatShape(c.shape) == "rows=64,d=14336,d2=28672");
  CHECK(AxisValue(c.shape, "d2") == 28672);
  CHECK(AxisValue(c.shape, "hidden") == -1);
}

}  // namespace
}  // namespace kiln::bench
