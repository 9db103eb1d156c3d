// The benchmark definitions against the trace definitions: the committed default list is
// exactly what the traces' examples generate, it parses, and every routine of kiln-bench
// takes the axes, dtypes and tensors its op's trace definition describes.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "bench/op/default_list.h"
#include "bench/op/routine.h"
#include "bench/op/test_list.h"
#include "kernels/traces/trace_definition.h"

namespace kiln::bench {
namespace {

const std::string kSource = KILN_TEST_SOURCE_DIR;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::vector<traces::TraceDefinition>& Traces() {
  static const std::vector<traces::TraceDefinition> defs = [] {
    auto loaded = traces::LoadTraceDefinitions(kSource + "/kernels/traces");
    INFO(loaded.status().ToString());
    REQUIRE(loaded.ok());
    return *loaded;
  }();
  return defs;
}

const traces::TraceDefinition* FindTrace(std::string_view name) {
  for (const auto& t : Traces())
    if (t.name == name) return &t;
  return nullptr;
}

TEST_CASE("regenerating the default test list from the trace definitions yields no diff", "[bench][traces]") {
  auto generated = GenerateDefaultListFromDir(kSource + "/kernels/traces");
  INFO(generated.status().ToString());
  REQUIRE(generated.ok());
  const std::string committed = ReadFile(kSource + "/bench/definitions/default.list");
  const bool same = committed == *generated;
  if (!same) {
    std::istringstream a(committed), b(*generated);
    std::string la, lb;
    int line = 0;
    while (true) {
      ++line;
      const bool more_a = static_cast<bool>(std::getline(a, la));
      const bool more_b = static_cast<bool>(std::getline(b, lb));
      if (!more_a && !more_b) break;
      if (!more_a || !more_b || la != lb) {
        FAIL_CHECK("bench/definitions/default.list is stale at line "
                   << line << ":\n  committed: " << (more_a ? la : "(end)") << "\n  generated: " << (more_b ? lb : "(end)")
                   << "\nregenerate it: kiln-bench --generate-list kernels/traces --out bench/definitions/default.list");
        break;
      }
    }
  }
  CHECK(same);
}

TEST_CASE("the default test list parses, and its cases fit the routines that exist", "[bench][traces]") {
  auto cases = ParseTestList(ReadFile(kSource + "/bench/definitions/default.list"), "default.list");
  INFO(cases.status().ToString());
  REQUIRE(cases.ok());
  CHECK(!cases->empty());
  for (const auto& c : *cases) {
    INFO(c.origin << ": " << FormatCase(c));
    const Routine* routine = RoutineRegistry::Global().Find(c.routine);
    CHECK(FindTrace(c.routine) != nullptr);
    if (routine == nullptr) continue;  // kiln-bench reports it skipped; the lead adds the routine
    const std::vector<std::string> routine_axes = routine->axes();
    std::set<std::string> axes(routine_axes.begin(), routine_axes.end()), given;
    for (const auto& [name, value] : c.shape) given.insert(name);
    CHECK(given == axes);
    auto dtype = ParseDType(c.dtype);
    REQUIRE(dtype.ok());
    CHECK(routine->Describe(c.shape, *dtype).ok());
    for (const auto& b : c.backends) CHECK(HasBackend(*routine, b));
  }
}

TEST_CASE("every kiln-bench routine matches its op's trace definition", "[bench][traces]") {
  for (const Routine* routine : RoutineRegistry::Global().All()) {
    INFO("routine " << routine->name());
    const traces::TraceDefinition* trace = FindTrace(routine->name());
    REQUIRE(trace != nullptr);
    const auto var = trace->VarAxes();
    const std::vector<std::string> routine_axes = routine->axes();
    CHECK(std::set<std::string>(routine_axes.begin(), routine_axes.end()) ==
          std::set<std::string>(var.begin(), var.end()));
    const auto op_dtypes = trace->OpDtypes();
    for (DType d : routine->dtypes())
      CHECK(std::find(op_dtypes.begin(), op_dtypes.end(), DTypeName(d)) != op_dtypes.end());
    CHECK(HasBackend(*routine, "kiln"));
    CHECK(HasBackend(*routine, "reference"));

    for (const auto& example : trace->examples) {
      INFO("example " << example.name);
      auto dtype = ParseDType(example.dtype);
      REQUIRE(dtype.ok());
      auto spec = routine->Describe(example.axes, *dtype);
      INFO(spec.status().ToString());
      REQUIRE(spec.ok());
      const auto values = trace->AxisValues(example);
      std::set<std::string> described;
      for (const auto& t : spec->tensors) {
        INFO("tensor " << t.name);
        described.insert(t.name);
        const traces::TraceTensor* in = nullptr;
        const traces::TraceTensor* out = nullptr;
        for (const auto& x : trace->inputs)
          if (x.name == t.name) in = &x;
        for (const auto& x : trace->outputs)
          if (x.name == t.name) out = &x;
        CHECK((in != nullptr) == (t.role != TensorRole::kOutput));
        CHECK((out != nullptr) == (t.role != TensorRole::kInput));
        const traces::TraceTensor* declared = in != nullptr ? in : out;
        REQUIRE(declared != nullptr);
        const traces::TraceTensor* typed = declared;  // same_as:<input> takes that input's dtypes
        if (!declared->same_as.empty())
          for (const auto& x : trace->inputs)
            if (x.name == declared->same_as) typed = &x;
        const bool dtype_ok = typed->dtypes.empty() ||
                              std::find(typed->dtypes.begin(), typed->dtypes.end(), DTypeName(t.dtype)) !=
                                  typed->dtypes.end();
        INFO("dtype " << DTypeName(t.dtype));
        CHECK(dtype_ok);
        std::vector<int64_t> shape;
        for (const auto& dim : declared->shape) shape.push_back(dim.axis.empty() ? dim.size : values.at(dim.axis));
        CHECK(shape == t.shape);
      }
      std::set<std::string> declared;
      for (const auto& x : trace->inputs) declared.insert(x.name);
      for (const auto& x : trace->outputs) declared.insert(x.name);
      CHECK(described == declared);
    }
  }
}

}  // namespace
}  // namespace kiln::bench
