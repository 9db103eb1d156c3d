// Validation of every op of the op table, derived from its trace definition, so a new op is
// covered without a test file of its own: starting from the arguments of the definition's
// examples (tests/client/ops/trace_example_args.h), each tensor in turn is given a dtype its
// definition does not allow, no dimensions, a null pointer, a host pointer, and an element
// offset that breaks its dtype's alignment; every such call must be refused with
// INVALID_ARGUMENT naming that tensor, before anything reaches the driver or the daemon. The
// unbroken examples reaching the driver is checked in a child process without a GPU
// (tests/client/diag/call_log_test.cpp: "every op of the op table logs its name").
// The family tests (norm_validation_test.cpp, ...) keep the exact messages and the cases only
// an op has.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "client/ops/op_table.h"
#include "kiln/tensor_view.h"
#include "tests/client/ops/trace_example_args.h"
#include "tests/support/daemon_process.h"

namespace {

using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;
using kiln::client::OpDescriptor;
using kiln::client::testing::TraceExampleArgs;
namespace traces = kiln::traces;

const std::vector<traces::TraceDefinition>& Definitions() {
  static const std::vector<traces::TraceDefinition> defs = [] {
    auto loaded = traces::LoadTraceDefinitions(kiln::testing::KernelsDir() + "/traces");
    INFO(loaded.status().ToString());
    REQUIRE(loaded.ok());
    return *loaded;
  }();
  return defs;
}

// The ops a call can be made for from a trace example alone: invokable, and not planned on
// the host from the index arrays' contents (planned_on_host: batch_decode in
// decode_validation_test.cpp, batch_prefill_* in prefill_validation_test.cpp).
std::vector<const OpDescriptor*> ExampleCallableOps() {
  std::vector<const OpDescriptor*> ops;
  for (const OpDescriptor* op : kiln::client::AllOps())
    if (op->invoke != nullptr && !op->planned_on_host) ops.push_back(op);
  return ops;
}

// A dtype the definition does not allow for `t` (one whose dtype is the same as another's:
// any other than that one's).
DType ForbiddenDType(const traces::TraceDefinition& def, const traces::TraceTensor& t, const TraceExampleArgs& args) {
  std::vector<std::string> allowed = t.dtypes;
  if (!t.same_as.empty()) allowed = {kiln::DTypeName(args.Tensor(t.same_as)->dtype)};
  for (DType d : {DType::kInt64, DType::kUInt8, DType::kFloat32, DType::kInt32})
    if (std::find(allowed.begin(), allowed.end(), kiln::DTypeName(d)) == allowed.end()) return d;
  FAIL(def.name << ": " << t.name << " allows every dtype");
  return DType::kInt64;
}

struct Breakage {
  const char* what;
  void (*apply)(TensorView& t);
};

const Breakage kBreakages[] = {
    {"no dimensions", [](TensorView& t) { t.ndim = 0; }},
    {"a null pointer", [](TensorView& t) { t.data = nullptr; }},
    {"a host pointer", [](TensorView& t) { t.device = kiln::Device::CPU(); }},
    {"a pointer off its dtype's alignment",
     [](TensorView& t) { t.data = static_cast<char*>(t.data) + (kiln::DTypeSize(t.dtype) > 1 ? 1 : 0); }},
};

void CheckRefusedNaming(const OpDescriptor& op, TraceExampleArgs& args, const std::string& tensor,
                        const std::string& what) {
  const kiln::Status status = op.invoke(op, args, nullptr);
  INFO(op.name << ": " << tensor << " with " << what << ": " << status.ToString());
  CHECK(status.code() == StatusCode::kInvalidArgument);
  CHECK(status.message().find(tensor) != std::string::npos);
}

TEST_CASE("every op refuses a tensor of a dtype its trace definition does not allow, naming it", "[client][ops]") {
  for (const OpDescriptor* op : ExampleCallableOps()) {
    const traces::TraceDefinition* def = kiln::client::testing::FindTraceDefinition(Definitions(), op->op);
    REQUIRE(def != nullptr);
    for (size_t e = 0; e < def->examples.size(); ++e) {
      TraceExampleArgs base(*def, e);
      for (const auto& [name, view] : base.tensors()) {
        const traces::TraceTensor* t = nullptr;
        for (const auto* list : {&def->inputs, &def->outputs})
          for (const auto& candidate : *list)
            if (candidate.name == name && t == nullptr) t = &candidate;
        REQUIRE(t != nullptr);
        TraceExampleArgs args = base;
        TensorView broken = view;
        broken.dtype = ForbiddenDType(*def, *t, base);
        args.SetTensor(name, broken);
        CheckRefusedNaming(*op, args, name, std::string("dtype ") + kiln::DTypeName(broken.dtype));
      }
    }
  }
}

TEST_CASE("every op refuses a tensor without dimensions, at a null or host pointer, or misaligned, naming it",
          "[client][ops]") {
  for (const OpDescriptor* op : ExampleCallableOps()) {
    const traces::TraceDefinition* def = kiln::client::testing::FindTraceDefinition(Definitions(), op->op);
    REQUIRE(def != nullptr);
    const TraceExampleArgs base(*def);
    for (const auto& [name, view] : base.tensors()) {
      for (const Breakage& breakage : kBreakages) {
        if (std::string(breakage.what).find("alignment") != std::string::npos && kiln::DTypeSize(view.dtype) == 1)
          continue;  // every address is aligned for a one-byte dtype
        TraceExampleArgs args = base;
        TensorView broken = view;
        breakage.apply(broken);
        args.SetTensor(name, broken);
        CheckRefusedNaming(*op, args, name, breakage.what);
      }
    }
  }
}

TEST_CASE("the op table and the trace definitions name the same ops", "[client][ops]") {
  for (const OpDescriptor* op : kiln::client::AllOps()) {
    const traces::TraceDefinition* def = kiln::client::testing::FindTraceDefinition(Definitions(), op->op);
    INFO(op->name << " (" << op->cpp_api << ") is in the op table but has no trace definition: add kernels/traces/"
                  << op->op << ".json (kernels/traces/README.md, docs/adding-a-kernel.md)");
    REQUIRE(def != nullptr);
    INFO("kernels/traces/" << def->file);
    CHECK(def->api_cpp == op->cpp_api);
    CHECK(def->op_type == op->family);
    if (!def->api_c.empty()) CHECK(def->api_c == op->c_api);
  }
  for (const traces::TraceDefinition& def : Definitions()) {
    if (def.IsInternal()) continue;  // an internal op (tensor_stats) is no op of the public API
    bool found = false;
    for (const OpDescriptor* op : kiln::client::AllOps()) found = found || def.name == op->op;
    INFO("kernels/traces/" << def.file << " declares " << def.api_cpp
                           << ", but no op of the op table has it: declare it with KILN_REGISTER_OP in client/ops/"
                           << def.op_type << "/" << def.op_type << "_ops.cpp (docs/adding-a-kernel.md)");
    CHECK(found);
  }
}

TEST_CASE("only the collectives and the host-planned ops are left out of the checks above", "[client][ops]") {
  // A new op is covered above unless it is added here with the reason and a test of its own.
  std::set<std::string> left_out;
  for (const OpDescriptor* op : kiln::client::AllOps()) left_out.insert(op->name);
  for (const OpDescriptor* op : ExampleCallableOps()) {
    left_out.erase(op->name);
    INFO(op->name);
    const traces::TraceDefinition* def = kiln::client::testing::FindTraceDefinition(Definitions(), op->op);
    REQUIRE(def != nullptr);
    CHECK_FALSE(def->examples.empty());
  }
  CHECK(left_out == std::set<std::string>{"all_reduce", "all_reduce_add_rms_norm", "batch_decode",
                                          "batch_prefill_paged", "batch_prefill_ragged"});
}

}  // namespace
