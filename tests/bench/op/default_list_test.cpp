// The benchmark definitions against the trace definitions and the op table: the default cases
// (generated from the traces' examples: kiln-bench --traces) parse and fit routines that exist,
// every op of the client's op table has a kiln-bench routine, and every routine takes the axes,
// dtypes and tensors its op's trace definition describes.
#include <catch2/catch.hpp>

#include <set>

#include "bench/op/default_list.h"
#include "bench/op/routine.h"
#include "bench/op/test_list.h"
#include "client/ops/op_table.h"
#include "kernels/traces/trace_definition.h"

namespace kiln::bench {
namespace {

const std::string kSource = KILN_TEST_SOURCE_DIR;

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

TEST_CASE("the default cases parse, and each fits a routine that exists", "[bench][traces]") {
  auto generated = GenerateDefaultListFromDir(kSource + "/kernels/traces");
  INFO(generated.status().ToString());
  REQUIRE(generated.ok());
  auto cases = ParseTestList(*generated, "kernels/traces");
  INFO(cases.status().ToString());
  REQUIRE(cases.ok());
  CHECK(!cases->empty());
  for (const auto& c : *cases) {
    INFO(c.origin << ": " << FormatCase(c));
    const Routine* routine = RoutineRegistry::Global().Find(c.routine);
    CHECK(FindTrace(c.routine) != nullptr);
    INFO("the trace definition kernels/traces/" << c.routine << ".json has examples, but kiln-bench has no routine "
                                                << c.routine << ": add bench/op/routines/" << c.routine
                                                << ".cpp (docs/adding-a-kernel.md)");
    REQUIRE(routine != nullptr);
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

TEST_CASE("every op of the op table has a kiln-bench routine", "[bench]") {
  size_t covered = 0;
  for (const client::OpDescriptor* op : client::AllOps()) {
    if (op->invoke == nullptr) continue;  // a collective: bench/comm measures it (kiln-bench drives one GPU)
    INFO(op->name << " (" << op->cpp_api << ") has no kiln-bench routine '" << op->op << "': add bench/op/routines/"
                  << op->op << ".cpp with its float64 reference (docs/adding-a-kernel.md)");
    CHECK(RoutineRegistry::Global().Find(op->op) != nullptr);
    ++covered;
  }
  CHECK(covered >= 14);  // the op table is linked whole: every op of the library registered itself
}

TEST_CASE("every routine's check shapes are cases it takes, for each of its dtypes", "[bench]") {
  for (const Routine* routine : RoutineRegistry::Global().All()) {
    const std::vector<std::string> routine_axes = routine->axes();
    const std::set<std::string> axes(routine_axes.begin(), routine_axes.end());
    const std::vector<ShapeAxes> shapes = routine->CheckShapes();
    CHECK_FALSE(shapes.empty());
    for (const ShapeAxes& shape : shapes) {
      INFO("routine " << routine->name() << " check shape " << FormatShape(shape));
      std::set<std::string> given;
      for (const auto& [name, value] : shape) given.insert(name);
      CHECK(given == axes);
      for (DType d : routine->dtypes()) {
        auto spec = routine->Describe(shape, d);
        INFO(DTypeName(d) << ": " << spec.status().ToString());
        CHECK(spec.ok());
      }
    }
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
        const bool dtype_ok = typed->dtypes.empty() || std::find(typed->dtypes.begin(), typed->dtypes.end(),
                                                                 DTypeName(t.dtype)) != typed->dtypes.end();
        INFO("dtype " << DTypeName(t.dtype));
        CHECK(dtype_ok);
        std::vector<int64_t> shape;
        for (const auto& dim : declared->shape) shape.push_back(dim.axis.empty() ? dim.size : values.at(dim.axis));
        CHECK(shape == t.shape);
      }
      // Every tensor of the definition, except an optional input a routine may leave out (gemm
      // times the plain product; its bias and c are the GPU tests').
      std::set<std::string> declared, required;
      for (const auto& x : trace->inputs) {
        declared.insert(x.name);
        if (!x.optional) required.insert(x.name);
      }
      for (const auto& x : trace->outputs) declared.insert(x.name), required.insert(x.name);
      for (const std::string& name : described) CHECK(declared.count(name) == 1);
      for (const std::string& name : required) {
        INFO("the routine's case has no tensor '" << name << "'");
        CHECK(described.count(name) == 1);
      }
    }
  }
}

}  // namespace
}  // namespace kiln::bench
