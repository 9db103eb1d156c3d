// Real NVRTC compiles of fused_moe's own kernels (the decode path's GEMVs, plain, folded and in one
// grid, and the one grid's preparing block): both dtypes for
// sm_90a, with ptxas' attributes checked against the launch hints (256 threads without spills or
// stack, the prologue's tables the only shared memory, registers that let kGemvBlocksPerSm blocks
// share an SM); both share one PCH folder; any other target is refused (the op is sm_90a only, as
// its grouped path is). The GPU checks results (tests/client/ops/gpu_fused_moe_test.cpp).
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

void CompileAndCheck(const char* arch_name, const char* dtype) {
  const CompiledSpec compiled = GenerateAndCompile("fused_moe", {{"dtype", dtype}}, arch_name);
  const server::CompileResult& result = compiled.result;
  REQUIRE(result.kernels.size() == 6);
  REQUIRE(compiled.spec.launch.size() == 6);
  std::set<std::string> names;
  for (const server::KernelAttributes& k : result.kernels) {
    INFO(arch_name << " " << dtype << " " << k.name << ": registers " << k.registers << " stack " << k.stack_bytes
                   << " spills " << k.spill_store_bytes << "/" << k.spill_load_bytes << " static smem "
                   << k.static_shared_bytes << " max threads " << k.max_threads_per_block);
    names.insert(k.name);
    CHECK(k.stack_bytes == 0);
    CHECK(k.spill_store_bytes == 0);
    CHECK(k.spill_load_bytes == 0);
    CHECK(k.max_threads_per_block >= moe::kGemvBlock);
    // The preparing block only zeroes counters and writes slot_to_row: no tables.
    if (k.name == moe::kFusedMoeOneGridPrepareEntry) {
      CHECK(k.static_shared_bytes == 0);
      continue;
    }
    // ids, the slots of the block's expert, first slots per expert, counts: under 10 KiB.
    CHECK(k.static_shared_bytes >= 4 * (2 * moe::kMaxGemvSlots + moe::kMaxExperts));
    CHECK(k.static_shared_bytes <= 10 * 1024);
    // 32 registers of loads in flight, 8 sums, the input units: kGemvBlocksPerSm blocks of 256
    // threads fit an SM's 64 K registers (measured 78-80 on sm_90a with CUDA 13).
    CHECK(k.registers * moe::kGemvBlock * moe::kGemvBlocksPerSm <= 65536);
  }
  CHECK(names == std::set<std::string>{moe::kFusedMoeGateUpEntry, moe::kFusedMoeDownEntry,
                                       moe::kFusedMoeGateUpFoldedEntry, moe::kFusedMoeDownFoldedEntry,
                                       moe::kFusedMoeOneGridPrepareEntry, moe::kFusedMoeOneGridEntry});
  for (const auto& launch : compiled.spec.launch) CHECK(launch.block == moe::kGemvBlock);
}

TEST_CASE("both fused_moe specializations compile for sm_90a without spills", "[moe][compile]") {
  for (const char* dtype : {"bf16", "fp16"}) CompileAndCheck("sm_90a", dtype);
}

TEST_CASE("fused_moe compiles only for sm_90a, and says so for any other target", "[moe][compile]") {
  auto spec = OpRegistry::Builtin().Generate("fused_moe", {{"dtype", "bf16"}}, *Tree());
  REQUIRE(spec.ok());
  for (const char* other : {"sm_75", "sm_80", "sm_89", "sm_100a"}) {
    auto arch = ResolveArch(*GpuArch::Parse(other), spec->arch_families, spec->uri);
    INFO(other);
    REQUIRE(!arch.ok());
    CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(arch.status().message()).find("sm_90a") != std::string::npos);
  }
  // An H200 reports sm_90: its code is the arch-specific sm_90a.
  auto hopper = ResolveArch(*GpuArch::Parse("sm_90"), spec->arch_families, spec->uri);
  REQUIRE(hopper.ok());
  CHECK(hopper->str() == "sm_90a");
}

TEST_CASE("both fused_moe specializations share one PCH folder", "[moe][pch]") {
  std::set<std::string> keys;
  for (const char* dtype : {"bf16", "fp16"}) {
    auto spec = OpRegistry::Builtin().Generate("fused_moe", {{"dtype", dtype}}, *Tree());
    REQUIRE(spec.ok());
    keys.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
  }
  CHECK(keys.size() == 1);
}

}  // namespace
}  // namespace kiln::kernels
