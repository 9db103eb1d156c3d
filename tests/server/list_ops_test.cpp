// KernelService.ListOps against a real kilnd: every registered op with its params and arch
// families as its generator states them, its trace definition as the daemon's kernels folder
// holds it, the name filter, and an unknown name (NOT_FOUND naming the known ones) that leaves
// the daemon serving.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "kernels/jit/op_generator.h"
#include "kernels/traces/trace_definition.h"
#include "tests/support/daemon_process.h"
#include "tests/support/kiln_rpc.h"
#include "tests/support/temp_dir.h"

using namespace kiln::testing;
namespace v1 = kiln::v1;
namespace fs = std::filesystem;
using kiln::kernels::ParamInfo;

namespace {

struct Listed {
  grpc::Status status;
  v1::ListOpsResponse response;
};

Listed ListOps(Rpc& rpc, const std::string& name = "") {
  v1::ListOpsRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  Listed l;
  l.status = rpc.kernels->ListOps(&context, request, &l.response);
  return l;
}

// The wire form says what the generator's ParamInfo says, field by field.
void CheckParam(const v1::ParamSpec& wire, const ParamInfo& info) {
  INFO("param " << info.name);
  CHECK(wire.name() == info.name);
  CHECK(wire.help() == info.help);
  CHECK_FALSE(wire.help().empty());
  const bool choice = info.kind == ParamInfo::Kind::kChoice;
  CHECK(wire.kind() == (choice ? v1::ParamSpec::KIND_CHOICE : v1::ParamSpec::KIND_INT));
  CHECK(std::vector<std::string>(wire.choices().begin(), wire.choices().end()) == info.choices);
  if (!choice) {
    CHECK(wire.min() == info.min);
    CHECK(wire.max() == info.max);
    CHECK(wire.power_of_two() == info.power_of_two);
    CHECK(wire.even() == info.even);
  }
  CHECK(wire.default_value() == info.default_value);
  CHECK(wire.required() == info.required());
  CHECK(wire.allowed() == kiln::kernels::AllowedText(info));
}

}  // namespace

TEST_CASE("ListOps lists every registered op with its params, arch families and trace definition",
          "[kernel][discovery]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto listed = ListOps(rpc);
  INFO(listed.status.error_message());
  REQUIRE(listed.status.ok());
  const auto& registry = kiln::kernels::OpRegistry::Builtin();
  REQUIRE(listed.response.ops_size() == static_cast<int>(registry.all().size()));
  REQUIRE(listed.response.ops_size() > 10);

  int with_trace = 0;
  std::string previous;
  for (const v1::OpInfo& op : listed.response.ops()) {
    INFO("op " << op.name());
    CHECK(op.name() > previous);  // sorted, each once
    previous = op.name();
    const kiln::kernels::OpGenerator* generator = registry.Find(op.name());
    REQUIRE(generator != nullptr);
    CHECK(op.family() == generator->family());
    CHECK(op.description() == generator->description());
    const std::vector<ParamInfo> params = generator->params();
    REQUIRE(op.params_size() == static_cast<int>(params.size()));
    for (size_t i = 0; i < params.size(); ++i) CheckParam(op.params(static_cast<int>(i)), params[i]);
    std::vector<std::string> families;
    for (const auto& f : generator->arch_families()) families.push_back(f.name);
    CHECK(std::vector<std::string>(op.arch_families().begin(), op.arch_families().end()) == families);
    CHECK_FALSE(op.arch_families().empty());

    // The text of the served kernels folder's file, byte for byte, and a valid definition.
    const std::string file = KernelsDir() + "/traces/" + op.name() + ".json";
    if (!fs::exists(file)) {
      CHECK(op.trace_definition().empty());
      continue;
    }
    ++with_trace;
    CHECK(op.trace_definition() == ReadFile(file));
    auto parsed = kiln::traces::ParseTraceDefinition(op.trace_definition(), op.name() + ".json");
    INFO(parsed.status().ToString());
    REQUIRE(parsed.ok());
    CHECK(parsed->name == op.name());
    CHECK(parsed->op_type == op.family());
  }
  // The source tree has a definition for every op (tests/kernels/trace_definitions_test.cpp).
  CHECK(with_trace == listed.response.ops_size());

  auto rmsnorm = std::find_if(listed.response.ops().begin(), listed.response.ops().end(),
                              [](const v1::OpInfo& op) { return op.name() == "rmsnorm"; });
  REQUIRE(rmsnorm != listed.response.ops().end());
  CHECK(rmsnorm->family() == "norm");
  REQUIRE(rmsnorm->params_size() == 3);
  CHECK(rmsnorm->params(0).name() == "dtype");
  CHECK(rmsnorm->params(0).required());
  CHECK(rmsnorm->params(1).allowed() == "an integer in 1..65536");
  CHECK(rmsnorm->params(2).default_value() == "auto");
  CHECK(rmsnorm->arch_families(0) == "sm_80+");
}

TEST_CASE("ListOps by name gives one op, and an unknown name is NOT_FOUND naming the known ones",
          "[kernel][discovery]") {
  TempDir dir;
  DaemonProcess d({.root = dir.path()});
  Rpc rpc(d.channel());
  auto one = ListOps(rpc, "fused_add_rmsnorm");
  REQUIRE(one.status.ok());
  REQUIRE(one.response.ops_size() == 1);
  CHECK(one.response.ops(0).name() == "fused_add_rmsnorm");
  CHECK(one.response.ops(0).trace_definition() == ReadFile(KernelsDir() + "/traces/fused_add_rmsnorm.json"));

  auto unknown = ListOps(rpc, "no_such_op");
  CHECK(unknown.status.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK_THAT(unknown.status.error_message(), Catch::Contains("unknown op 'no_such_op'"));
  CHECK_THAT(unknown.status.error_message(), Catch::Contains("known ops: "));
  CHECK_THAT(unknown.status.error_message(), Catch::Contains("rmsnorm"));
  CHECK_THAT(unknown.status.error_message(), Catch::Contains("top_k_sampling"));
  // A path is only an unknown name: the daemon never opens a file for it.
  auto path = ListOps(rpc, "../traces/rmsnorm");
  CHECK(path.status.error_code() == grpc::StatusCode::NOT_FOUND);

  // The daemon keeps serving.
  CHECK(ListOps(rpc).status.ok());
  auto kernel = Get(rpc, OpRequest("rmsnorm", {{"dtype", "fp32"}, {"hidden", "512"}}, "sm_80"));
  INFO(kernel.status.error_message());
  CHECK(kernel.status.ok());
}

TEST_CASE("ListOps reads the trace definitions of the daemon's kernels folder, as they are now",
          "[kernel][discovery]") {
  TempDir dir;
  // A kernels folder without traces/ (as a library installed without them would be).
  const std::string kernels = dir / "kernels";
  fs::create_directories(kernels);
  for (const char* part : {"include", "src"})
    fs::copy(KernelsDir() + "/" + part, kernels + "/" + part, fs::copy_options::recursive);
  DaemonProcess d({.root = dir.path(), .kernels_dir = kernels});
  Rpc rpc(d.channel());
  auto bare = ListOps(rpc);
  REQUIRE(bare.status.ok());
  REQUIRE(bare.response.ops_size() > 0);
  for (const auto& op : bare.response.ops()) {
    INFO(op.name());
    CHECK(op.trace_definition().empty());
    CHECK(op.params_size() == static_cast<int>(kiln::kernels::OpRegistry::Builtin().Find(op.name())->params().size()));
  }
  // A definition that appears (or changes) is served by the next call; the text is not checked.
  fs::create_directories(kernels + "/traces");
  WriteFile(kernels + "/traces/rmsnorm.json", "{\"name\": \"rmsnorm\", \"edited\": true}\n");
  auto edited = ListOps(rpc, "rmsnorm");
  REQUIRE(edited.status.ok());
  CHECK(edited.response.ops(0).trace_definition() == "{\"name\": \"rmsnorm\", \"edited\": true}\n");
  CHECK(ListOps(rpc, "fused_add_rmsnorm").response.ops(0).trace_definition().empty());
}
