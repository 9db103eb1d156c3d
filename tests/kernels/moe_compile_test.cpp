// Real NVRTC compiles of moe_route: every (dtype, scoring, max_experts) specialization for
// sm_90 and a spread of them for sm_80, with ptxas' attributes checked against the launch
// hint (128 threads, no spills, no stack, the group scratch as the only shared memory); every
// specialization shares one PCH folder; below sm_80 is refused. The GPU checks results
// (tests/client/ops/gpu_moe_route_test.cpp).
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/moe/moe_contract.h"
#include "server/jit/nvrtc_compiler.h"
#include "server/jit/pch_key.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

void CompileAndCheck(const char* arch_name, const char* dtype, const char* scoring, const char* max_experts) {
  const CompiledSpec compiled = GenerateAndCompile(
      "moe_route", {{"dtype", dtype}, {"scoring", scoring}, {"max_experts", max_experts}}, arch_name);
  const JitSpec* spec = &compiled.spec;
  const server::CompileResult* result = &compiled.result;
  REQUIRE(result->kernels.size() == 1);
  const server::KernelAttributes& k = result->kernels[0];
  INFO("registers " << k.registers << " stack " << k.stack_bytes << " spills " << k.spill_store_bytes << "/"
                    << k.spill_load_bytes << " static smem " << k.static_shared_bytes);
  CHECK(k.name == moe::kMoeRouteEntry);
  REQUIRE(spec->launch.size() == 1);
  CHECK(spec->launch[0].block == moe::kBlock);
  CHECK(k.max_threads_per_block >= moe::kBlock);
  CHECK(k.stack_bytes == 0);
  CHECK(k.spill_store_bytes == 0);
  CHECK(k.spill_load_bytes == 0);
  CHECK(k.registers <= 128);
  // The per-warp scratch of the group scores: max_experts doubles per warp.
  CHECK(k.static_shared_bytes == moe::kWarpsPerBlock * std::stoi(max_experts) * 8);
}

TEST_CASE("every moe_route specialization compiles for sm_90 without spills", "[moe][compile]") {
  for (const char* dtype : {"fp32", "fp16", "bf16"})
    for (const char* scoring : {"softmax", "sigmoid"})
      for (const char* max_experts : {"32", "64", "128", "256"}) CompileAndCheck("sm_90", dtype, scoring, max_experts);
}

TEST_CASE("moe_route compiles for sm_80 at each scoring and size class", "[moe][compile]") {
  CompileAndCheck("sm_80", "bf16", "softmax", "32");
  CompileAndCheck("sm_80", "fp16", "softmax", "128");
  CompileAndCheck("sm_80", "fp32", "sigmoid", "256");
  CompileAndCheck("sm_80", "bf16", "sigmoid", "64");
}

TEST_CASE("a moe_route spec cannot be built below its family", "[moe][compile]") {
  auto spec = OpRegistry::Builtin().Generate(
      "moe_route", {{"dtype", "bf16"}, {"scoring", "softmax"}, {"max_experts", "32"}}, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse("sm_75"), spec->arch_families, spec->uri);
  REQUIRE(!arch.ok());
  CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(arch.status().message()).find("sm_80+") != std::string::npos);
}

TEST_CASE("every moe_route specialization shares one PCH folder", "[moe][pch]") {
  std::set<std::string> keys;
  for (const char* dtype : {"fp32", "fp16", "bf16"})
    for (const char* scoring : {"softmax", "sigmoid"})
      for (const char* max_experts : {"32", "256"}) {
        auto spec = OpRegistry::Builtin().Generate(
            "moe_route", {{"dtype", dtype}, {"scoring", scoring}, {"max_experts", max_experts}}, *Tree());
        REQUIRE(spec.ok());
        keys.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
      }
  CHECK(keys.size() == 1);
}

}  // namespace
}  // namespace kiln::kernels
