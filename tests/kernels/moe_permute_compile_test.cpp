// Real NVRTC compiles of moe_permute: every max_experts specialization for sm_90a and sm_80
// (the family is sm_80+: __match_any_sync needs sm_70), with ptxas' attributes checked against
// the launch hints (the permutation's 1024 threads, one block's or the multi-block count's and
// rank's, with no spills, their shared tables the only shared memory; the inversion's 256
// threads with m_indptr and the counts in shared memory; the gather's 256 threads without
// shared memory); every specialization shares
// one PCH folder; below sm_80 is refused. The GPU checks results
// (tests/client/ops/gpu_moe_permute_test.cpp).
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

void CompileAndCheck(const char* arch_name, int max_experts) {
  const CompiledSpec compiled = GenerateAndCompile("moe_permute", {{"max_experts", std::to_string(max_experts)}},
                                                   arch_name);
  const JitSpec* spec = &compiled.spec;
  const server::CompileResult* result = &compiled.result;
  REQUIRE(result->kernels.size() == 5);
  REQUIRE(spec->launch.size() == 5);
  for (const server::KernelAttributes& k : result->kernels) {
    INFO(k.name << ": registers " << k.registers << " stack " << k.stack_bytes << " spills " << k.spill_store_bytes
                << "/" << k.spill_load_bytes << " static smem " << k.static_shared_bytes << " max threads "
                << k.max_threads_per_block);
    CHECK(k.stack_bytes == 0);
    CHECK(k.spill_store_bytes == 0);
    CHECK(k.spill_load_bytes == 0);
    if (k.name == moe::kMoePermuteEntry || k.name == moe::kMoePermuteRankEntry) {
      CHECK(k.max_threads_per_block >= moe::kPermuteBlock);  // so at most 64 registers
      // counts, ranked [max_experts], starts [max_experts + 1], warp_counts [32][max_experts]
      CHECK(k.static_shared_bytes == 4 * (35 * max_experts + 1));
    } else if (k.name == moe::kMoePermuteCountEntry) {
      CHECK(k.max_threads_per_block >= moe::kPermuteBlock);
      CHECK(k.static_shared_bytes == 4 * max_experts);  // counts
    } else if (k.name == moe::kMoePermuteInvertEntry) {
      CHECK(spec->launch[4].block == moe::kInvertBlock);
      CHECK(k.max_threads_per_block >= moe::kInvertBlock);
      CHECK(k.static_shared_bytes == 4 * (2 * max_experts + 1));  // m_indptr, expert_counts
    } else {
      CHECK(k.name == moe::kMoePermuteGatherEntry);
      CHECK(spec->launch[1].block == moe::kGatherBlock);
      CHECK(k.max_threads_per_block >= moe::kGatherBlock);
      CHECK(k.static_shared_bytes == 0);
    }
  }
}

TEST_CASE("every moe_permute specialization compiles for sm_90a and sm_80 without spills", "[moe][compile]") {
  for (int max_experts : {32, 64, 128, 256}) {
    CompileAndCheck("sm_90a", max_experts);
    CompileAndCheck("sm_80", max_experts);
  }
}

TEST_CASE("a moe_permute spec cannot be built below its family", "[moe][compile]") {
  auto spec = OpRegistry::Builtin().Generate("moe_permute", {{"max_experts", "64"}}, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse("sm_75"), spec->arch_families, spec->uri);
  REQUIRE(!arch.ok());
  CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(arch.status().message()).find("sm_80+") != std::string::npos);
}

TEST_CASE("every moe_permute specialization shares one PCH folder", "[moe][pch]") {
  std::set<std::string> keys;
  for (const char* max_experts : {"32", "64", "128", "256"}) {
    auto spec = OpRegistry::Builtin().Generate("moe_permute", {{"max_experts", max_experts}}, *Tree());
    REQUIRE(spec.ok());
    keys.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
  }
  CHECK(keys.size() == 1);
}

}  // namespace
}  // namespace kiln::kernels
