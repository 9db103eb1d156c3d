// The moe_route generator (kernels/ops/moe/moe_route_generator.cpp): its registry entry and
// params, canonical readable URIs, the config it renders, the launch hint the contract states,
// and every bad or missing param refused by name.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/moe/moe_contract.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

using namespace generator_test;

TEST_CASE("the builtin registry serves moe_route with params {dtype, scoring, max_experts}", "[moe]") {
  const OpGenerator* op = OpRegistry::Builtin().Find("moe_route");
  REQUIRE(op != nullptr);
  CHECK(op->family() == "moe");
  CHECK(!op->description().empty());
  std::set<std::string> names;
  for (const ParamInfo& param : op->params()) {
    CHECK(!param.help.empty());
    CHECK(param.required());
    names.insert(param.name);
  }
  CHECK(names == std::set<std::string>{"dtype", "scoring", "max_experts"});
}

TEST_CASE("moe_route URIs are readable and one per (dtype, scoring, max_experts)", "[moe]") {
  const JitSpec spec = MustGenerate("moe_route", {{"dtype", "bf16"}, {"scoring", "sigmoid"}, {"max_experts", "256"}});
  CHECK(spec.uri == "moe_route_bf16_sigmoid_e256");
  CHECK(spec.params == Params{{"dtype", "bf16"}, {"scoring", "sigmoid"}, {"max_experts", "256"}});
  REQUIRE(spec.headers.size() == 1);
  const std::string& config = spec.headers[0].content;
  CHECK(Contains(config, "#define KILN_MOE_T __nv_bfloat16"));
  CHECK(Contains(config, "#define KILN_MOE_SIGMOID 1"));
  CHECK(Contains(config, "#define KILN_MOE_SLOTS 8"));
  CHECK(Contains(config, "#define KILN_MOE_WARPS 4"));
  CHECK(spec.entries == std::vector<std::string>{"kiln_moe_route"});
  REQUIRE(spec.launch.size() == 1);
  CHECK(spec.launch[0].block == moe::kBlock);
  CHECK(spec.launch[0].items_per_block == moe::kWarpsPerBlock);
  CHECK(spec.launch[0].dynamic_smem == 0);

  const JitSpec small = MustGenerate("moe_route", {{"dtype", "fp32"}, {"scoring", "softmax"}, {"max_experts", "32"}});
  CHECK(small.uri == "moe_route_fp32_softmax_e32");
  CHECK(Contains(small.headers[0].content, "#define KILN_MOE_SIGMOID 0"));
  CHECK(Contains(small.headers[0].content, "#define KILN_MOE_SLOTS 1"));

  std::set<std::string> uris;
  for (const char* dtype : {"fp32", "fp16", "bf16"})
    for (const char* scoring : {"softmax", "sigmoid"})
      for (const char* max_experts : {"32", "64", "128", "256"})
        uris.insert(
            MustGenerate("moe_route", {{"dtype", dtype}, {"scoring", scoring}, {"max_experts", max_experts}}).uri);
  CHECK(uris.size() == 24);
}

TEST_CASE("moe_route refuses a bad, unknown or missing param by name", "[moe]") {
  const Params good = {{"dtype", "bf16"}, {"scoring", "softmax"}, {"max_experts", "128"}};
  auto refused = [&](Params params, const std::string& key, const char* value, std::string_view part) {
    if (value == nullptr) params.erase(key);
    else params[key] = value;
    const auto spec = Generate("moe_route", params);
    INFO(key << " = " << (value ? value : "(missing)") << ": " << spec.status().ToString());
    REQUIRE(!spec.ok());
    CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(spec.status().message(), part));
  };
  refused(good, "dtype", "int8", "dtype");
  refused(good, "scoring", "relu", "scoring");
  refused(good, "max_experts", "512", "max_experts");
  refused(good, "max_experts", "48", "max_experts");
  refused(good, "max_experts", nullptr, "max_experts");
  refused(good, "top_k", "8", "top_k");
}

}  // namespace
}  // namespace kiln::kernels
