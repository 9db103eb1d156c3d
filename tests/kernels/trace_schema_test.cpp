// kiln_traces on its own: the schema checks of a trace definition (each rule broken once,
// with the message it must give) and the constraint expressions' grammar.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/traces/trace_definition.h"
#include "kernels/traces/trace_expression.h"
#include "tests/support/temp_dir.h"

namespace kiln::traces {
namespace {

using Json = nlohmann::ordered_json;

Json Valid() {
  return Json::parse(R"({
    "name": "act", "op_type": "activation", "description": "out = silu(x) * y",
    "api": {"cpp": "kiln::ops::act", "c": "kiln_act"},
    "axes": {"rows": {"type": "var"}, "d": {"type": "var"}, "d2": {"type": "var"}, "h": {"type": "const", "value": 128}},
    "inputs": {"input": {"shape": ["rows", "d2"], "dtype": ["fp16", "bf16"]},
               "table": {"shape": ["h", 4], "dtype": "fp32"}},
    "outputs": {"out": {"shape": ["rows", "d"], "dtype": "same_as:input"}},
    "scalars": {"eps": {"dtype": "float64", "default": 1e-6}},
    "constraints": ["d2 == 2 * d", "d % 8 == 0"],
    "tags": ["memory_bound"],
    "reference": {"torch": "import torch\ndef act(input, table): ...", "cpp": "tests/x.cpp:Ref"},
    "examples": [{"name": "llama-b1", "axes": {"rows": 1, "d": 14336, "d2": 28672}, "dtype": "bf16"}]
  })");
}

std::string Error(const Json& doc) {
  auto def = ParseTraceDefinition(doc.dump(), "act.json");
  if (def.ok()) return "(parsed)";
  return std::string(def.status().message());
}

// Text of a std::string or absl::string_view (Debian's abseil has its own).
bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("a valid trace definition parses, with its parts in file order", "[traces]") {
  auto def = ParseTraceDefinition(Valid().dump(), "act.json");
  INFO(def.status().ToString());
  REQUIRE(def.ok());
  CHECK(def->name == "act");
  CHECK(def->api_cpp == "kiln::ops::act");
  CHECK(def->VarAxes() == std::vector<std::string>{"rows", "d", "d2"});
  CHECK(def->FindAxis("h")->is_const);
  CHECK(def->FindAxis("h")->value == 128);
  CHECK(def->OpDtypes() == std::vector<std::string>{"fp16", "bf16"});
  CHECK(def->outputs[0].same_as == "input");
  CHECK(def->inputs[1].shape[1].size == 4);
  CHECK(def->scalars[0].has_default);
  REQUIRE(def->examples.size() == 1);
  CHECK(def->examples[0].axes ==
        std::vector<std::pair<std::string, int64_t>>{{"rows", 1}, {"d", 14336}, {"d2", 28672}});
  CHECK(def->AxisValues(def->examples[0]).at("h") == 128);
  CHECK(!def->inputs[1].optional);
  Json optional = Valid();
  optional["inputs"]["table"]["optional"] = true;
  auto with_optional = ParseTraceDefinition(optional.dump(), "act.json");
  REQUIRE(with_optional.ok());
  CHECK(with_optional->inputs[1].optional);
}

TEST_CASE("each broken schema rule is refused with a message naming the place", "[traces]") {
  struct Case {
    const char* what;
    void (*edit)(Json&);
    const char* message;
  };
  const Case cases[] = {
      {"malformed JSON", nullptr, "JSON"},
      {"missing key", [](Json& d) { d.erase("examples"); }, "missing required key 'examples'"},
      {"unknown key", [](Json& d) { d["contraints"] = Json::array(); }, "unknown key 'contraints'"},
      {"api.cpp outside kiln", [](Json& d) { d["api"]["cpp"] = "act"; }, "api.cpp"},
      {"api.c without kiln_", [](Json& d) { d["api"]["c"] = "act"; }, "api.c"},
      {"bad axis type", [](Json& d) { d["axes"]["d"]["type"] = "variable"; }, "axes.d.type"},
      {"const axis without value", [](Json& d) { d["axes"]["h"].erase("value"); }, "missing required key 'value'"},
      {"shape names no axis", [](Json& d) { d["inputs"]["input"]["shape"][1] = "hidden"; },
       "inputs.input.shape: 'hidden' is not an axis"},
      {"shape with zero", [](Json& d) { d["inputs"]["table"]["shape"][1] = 0; }, "positive integers"},
      {"unknown dtype", [](Json& d) { d["inputs"]["input"]["dtype"] = Json::array({"bfloat16"}); },
       "unknown dtype \"bfloat16\""},
      {"same_as on an input", [](Json& d) { d["inputs"]["table"]["dtype"] = "same_as:input"; }, "only for outputs"},
      {"optional output", [](Json& d) { d["outputs"]["out"]["optional"] = true; },
       "outputs.out.optional: only an input may be optional"},
      {"optional not a boolean", [](Json& d) { d["inputs"]["table"]["optional"] = 1; },
       "inputs.table.optional: must be true or false"},
      {"same_as names no input", [](Json& d) { d["outputs"]["out"]["dtype"] = "same_as:x"; },
       "same_as:x names no input"},
      {"in-place with another shape",
       [](Json& d) { d["outputs"]["input"] = Json::parse(R"({"shape": ["rows", "d"], "dtype": "same_as:input"})"); },
       "same shape"},
      {"in-place with another dtype",
       [](Json& d) { d["outputs"]["input"] = Json::parse(R"({"shape": ["rows", "d2"], "dtype": "fp32"})"); },
       "same_as:input"},
      {"scalar with a bad dtype", [](Json& d) { d["scalars"]["eps"]["dtype"] = "double"; },
       "unknown scalar dtype 'double'"},
      {"constraint on no axis", [](Json& d) { d["constraints"][0] = "d2 == 2 * hidden"; }, "'hidden' is not an axis"},
      {"constraint syntax", [](Json& d) { d["constraints"][0] = "d2 == 2 *"; }, "constraints[0]"},
      {"example misses a var axis", [](Json& d) { d["examples"][0]["axes"].erase("d2"); }, "missing the var axis 'd2'"},
      {"example names no axis", [](Json& d) { d["examples"][0]["axes"]["x"] = 1; }, "'x' is not an axis"},
      {"example changes a const axis", [](Json& d) { d["examples"][0]["axes"]["h"] = 64; }, "const axis of value 128"},
      {"example breaks a constraint", [](Json& d) { d["examples"][0]["axes"]["d2"] = 100; },
       "breaks the constraint 'd2 == 2 * d'"},
      {"example dtype not the op's", [](Json& d) { d["examples"][0]["dtype"] = "fp32"; }, "not a dtype of the op"},
      {"example name twice", [](Json& d) { d["examples"].push_back(d["examples"][0]); }, "used twice"},
      {"example name with a space", [](Json& d) { d["examples"][0]["name"] = "llama b1"; }, "without spaces"},
      {"no examples", [](Json& d) { d["examples"] = Json::array(); }, "at least one example"},
      {"reference.cpp without a function", [](Json& d) { d["reference"]["cpp"] = "tests/x.cpp"; }, "<file>:<function>"},
      {"reference.torch not a function", [](Json& d) { d["reference"]["torch"] = "x * 2"; }, "def ..."},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    std::string message;
    if (c.edit == nullptr) {
      auto def = ParseTraceDefinition("{\"name\": ", "act.json");
      REQUIRE(!def.ok());
      message = std::string(def.status().message());
    } else {
      Json doc = Valid();
      c.edit(doc);
      message = Error(doc);
    }
    INFO(message);
    CHECK(Contains(message, "act.json: "));
    CHECK(Contains(message, c.message));
  }
}

// An internal op (diagnostics): its C++ API in a non-public header, no C ABI, results returned
// as a struct rather than written to tensors, and no examples (so no benchmark cases), saying why.
Json ValidInternal() {
  return Json::parse(R"({
    "name": "stats", "op_type": "diag", "description": "counts and extremes of one tensor",
    "api": {"cpp": "kiln::client::diag::ComputeStats", "internal": "client/diag/stats.h"},
    "axes": {"numel": {"type": "var"}},
    "inputs": {"t": {"shape": ["numel"], "dtype": ["fp32", "int8"]}},
    "outputs": {},
    "returns": {"type": "Stats", "fields": {"count": "int64", "min": "float64"}},
    "reference": {"torch": "import torch\ndef stats(t): ...", "cpp": "tests/x.cpp:Ref"},
    "examples": [],
    "no_examples": "logging calls it, never a benchmark"
  })");
}

TEST_CASE("an internal op's definition: header, no C ABI, returned fields, no examples with a reason", "[traces]") {
  auto def = ParseTraceDefinition(ValidInternal().dump(), "stats.json");
  INFO(def.status().ToString());
  REQUIRE(def.ok());
  CHECK(def->IsInternal());
  CHECK(def->api_internal_header == "client/diag/stats.h");
  CHECK(def->api_c.empty());
  CHECK(def->outputs.empty());
  CHECK(def->returns.type == "Stats");
  CHECK(def->returns.fields ==
        std::vector<std::pair<std::string, std::string>>{{"count", "int64"}, {"min", "float64"}});
  CHECK(def->examples.empty());
  CHECK(def->no_examples == "logging calls it, never a benchmark");
  // A public op is none of that.
  auto pub = ParseTraceDefinition(Valid().dump(), "act.json");
  REQUIRE(pub.ok());
  CHECK(!pub->IsInternal());
  CHECK(pub->returns.type.empty());
  CHECK(pub->no_examples.empty());

  struct Case {
    const char* what;
    void (*edit)(Json&);
    const char* message;
  };
  const Case cases[] = {
      {"internal with a C name", [](Json& d) { d["api"]["c"] = "kiln_stats"; }, "has no C ABI export"},
      {"internal header public", [](Json& d) { d["api"]["internal"] = "client/include/kiln/stats.h"; }, "api.internal"},
      {"internal header absolute", [](Json& d) { d["api"]["internal"] = "/work/client/diag/stats.h"; }, "api.internal"},
      {"internal header outside", [](Json& d) { d["api"]["internal"] = "../stats.h"; }, "api.internal"},
      {"internal header not a header", [](Json& d) { d["api"]["internal"] = "client/diag/stats.cpp"; }, "api.internal"},
      {"no examples without a reason", [](Json& d) { d.erase("no_examples"); }, "must say why in \"no_examples\""},
      {"an empty reason", [](Json& d) { d["no_examples"] = ""; }, "no_examples: must say why"},
      {"a reason beside examples",
       [](Json& d) { d["examples"].push_back(Json::parse(R"({"name": "x", "axes": {"numel": 4}, "dtype": "fp32"})")); },
       "only for a definition without examples"},
      {"no outputs and no returns", [](Json& d) { d.erase("returns"); }, "outputs: must name at least one tensor"},
      {"returns without fields", [](Json& d) { d["returns"]["fields"] = Json::object(); }, "at least one member"},
      {"returns a field of no scalar dtype", [](Json& d) { d["returns"]["fields"]["min"] = "double"; },
       "returns.fields.min: must be a scalar dtype"},
      {"returns a qualified type", [](Json& d) { d["returns"]["type"] = "diag::Stats"; }, "returns.type"},
      {"returns an unknown key", [](Json& d) { d["returns"]["kind"] = "struct"; }, "unknown key 'kind'"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    Json doc = ValidInternal();
    c.edit(doc);
    auto broken = ParseTraceDefinition(doc.dump(), "stats.json");
    REQUIRE(!broken.ok());
    const std::string message(broken.status().message());
    INFO(message);
    CHECK(Contains(message, "stats.json: "));
    CHECK(Contains(message, c.message));
  }

  // A public op keeps every rule: a C name, examples, and no reason for having none.
  Json no_c = Valid();
  no_c["api"].erase("c");
  CHECK(Contains(Error(no_c), "missing required key 'c'"));
  Json no_examples = Valid();
  no_examples["examples"] = Json::array();
  no_examples["no_examples"] = "not benchmarked";
  CHECK(Contains(Error(no_examples), "only an internal op may have none"));
}

TEST_CASE("a definitions folder: sorted, and each name equals its file's stem", "[traces]") {
  kiln::testing::TempDir dir("kiln-traces");
  auto write = [&](const std::string& name, const Json& doc) { std::ofstream(dir / name) << doc.dump(2); };
  Json b = Valid();
  b["name"] = "b_op";
  write("b_op.json", b);
  Json a = Valid();
  a["name"] = "a_op";
  write("a_op.json", a);
  std::ofstream(dir / "README.md") << "not a definition";
  auto defs = LoadTraceDefinitions(dir.path());
  INFO(defs.status().ToString());
  REQUIRE(defs.ok());
  REQUIRE(defs->size() == 2);
  CHECK((*defs)[0].name == "a_op");
  CHECK((*defs)[1].name == "b_op");

  write("c_op.json", Valid());  // name "act"
  auto bad = LoadTraceDefinitions(dir.path());
  REQUIRE(!bad.ok());
  CHECK(Contains(std::string(bad.status().message()), "c_op.json: name 'act' must equal the file name's stem 'c_op'"));
  CHECK(!LoadTraceDefinitions(dir / "missing").ok());
}

double Eval(const std::string& e, std::map<std::string, int64_t> values = {{"a", 7}, {"b", 2}, {"d", 14336}}) {
  auto v = EvaluateExpression(e, values);
  INFO(e << ": " << v.status().ToString());
  REQUIRE(v.ok());
  return *v;
}

TEST_CASE("constraint expressions follow Python's grammar over integer axes", "[traces]") {
  CHECK(Eval("a + b * 3") == 13);
  CHECK(Eval("(a + b) * 3") == 27);
  CHECK(Eval("a // b") == 3);
  CHECK(Eval("-a // b") == -4);  // floor, as in Python
  CHECK(Eval("a % b") == 1);
  CHECK(Eval("-a % b") == 1);  // the divisor's sign
  CHECK(Eval("a / b") == 3.5);
  CHECK(Eval("b ** 3 ** 2") == 512);  // right-associative
  CHECK(Eval("-b ** 2") == -4);
  CHECK(Eval("1 <= a <= 7") == 1);
  CHECK(Eval("1 <= a < 7") == 0);
  CHECK(Eval("a == 7 and b != 2") == 0);
  CHECK(Eval("a == 7 or b != 2") == 1);
  CHECK(Eval("not a == 7") == 0);
  CHECK(Eval("a in (1, 7, 9)") == 1);
  CHECK(Eval("a not in (1, 7,)") == 0);
  CHECK(Eval("min(a, b, 5) + max(a, b) + abs(b - a)") == 14);
  CHECK(Eval("d % 128 == 0 and d // 2 == 7168") == 1);
  CHECK(Eval("True and 1_000 == 1000") == 1);
}

TEST_CASE("bad constraint expressions are refused with the position", "[traces]") {
  const std::pair<const char*, const char*> cases[] = {
      {"a +", "expected a number"},
      {"(a + 1", "expected ')'"},
      {"a $ b", "unexpected character '$'"},
      {"a b", "unexpected 'b'"},
      {"pow(a, 2)", "unknown function 'pow'"},
      {"abs(a, b)", "takes one argument"},
      {"a in 3", "parenthesized list"},
      {"a / (b - 2)", "division by zero"},
      {"x == 1", "'x' has no value"},
  };
  for (const auto& [expression, message] : cases) {
    auto v = EvaluateExpression(expression, {{"a", 7}, {"b", 2}});
    INFO(expression << ": " << v.status().ToString());
    REQUIRE(!v.ok());
    CHECK(v.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(std::string(v.status().message()), message));
    CHECK(Contains(std::string(v.status().message()), "position"));
  }
  CHECK(CheckExpression("d2 == 2 * d", {"d", "d2"}).ok());
  auto unknown = CheckExpression("d2 == 2 * hidden", {"d", "d2"});
  REQUIRE(!unknown.ok());
  CHECK(Contains(std::string(unknown.message()), "'hidden' is not an axis (axes: d, d2)"));
}

}  // namespace
}  // namespace kiln::traces
