// Real NVRTC compiles of fused_moe_fp8's own kernels (the gather-and-quantize, the
// silu-and-quantize and the decode path's two GEMVs): bf16 for sm_90a, with ptxas' attributes
// checked against the launch hints (a warp a row or kGemvBlock threads, no spills, no stack, the
// GEMVs' registers within kFp8GemvBlocksPerSm blocks an SM); any other target is refused (the op's GEMMs are sm_90a
// only). The GPU checks results (tests/client/ops/gpu_fused_moe_fp8_test.cpp).
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/moe/moe_contract.h"
#include "server/jit/nvrtc_compiler.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

TEST_CASE("fused_moe_fp8's quantizers and decode GEMVs compile for sm_90a without spills", "[moe][compile]") {
  const CompiledSpec compiled = GenerateAndCompile("fused_moe_fp8", {{"dtype", "bf16"}}, "sm_90a");
  const server::CompileResult& result = compiled.result;
  CHECK(compiled.spec.uri == "fused_moe_fp8_bf16");
  REQUIRE(result.kernels.size() == 4);
  const std::set<std::string> gemvs = {moe::kFusedMoeFp8GateUpEntry, moe::kFusedMoeFp8DownEntry};
  std::set<std::string> names;
  for (const server::KernelAttributes& k : result.kernels) {
    INFO(k.name << ": registers " << k.registers << " stack " << k.stack_bytes << " spills " << k.spill_store_bytes
                << "/" << k.spill_load_bytes << " static smem " << k.static_shared_bytes);
    names.insert(k.name);
    CHECK(k.stack_bytes == 0);
    CHECK(k.spill_store_bytes == 0);
    CHECK(k.spill_load_bytes == 0);
    if (gemvs.count(k.name) != 0) {
      // kFp8GemvBlocksPerSm blocks an SM: the registers of kGemvBlock threads each.
      CHECK(k.max_threads_per_block >= moe::kGemvBlock);
      CHECK(k.registers * moe::kGemvBlock * moe::kFp8GemvBlocksPerSm <= 65536);
      CHECK(k.static_shared_bytes > 0);  // the prologue's slots and the k parts' totals
    } else {
      CHECK(k.static_shared_bytes == 0);
      CHECK(k.max_threads_per_block >= moe::kFp8QuantBlock);
    }
  }
  CHECK(names == std::set<std::string>{moe::kFusedMoeFp8QuantizeEntry, moe::kFusedMoeFp8SiluAndMulQuantizeEntry,
                                       moe::kFusedMoeFp8GateUpEntry, moe::kFusedMoeFp8DownEntry});
  REQUIRE(compiled.spec.launch.size() == 4);
  for (const auto& launch : compiled.spec.launch) {
    INFO(launch.entry);
    const bool gemv = gemvs.count(launch.entry) != 0;
    CHECK(launch.block == (gemv ? moe::kGemvBlock : moe::kFp8QuantBlock));
    CHECK(launch.items_per_block == (gemv ? moe::kFp8GemvColumns : moe::kFp8QuantWarps));
  }
}

TEST_CASE("fused_moe_fp8 compiles only for sm_90a and takes bf16 only", "[moe][compile]") {
  auto spec = OpRegistry::Builtin().Generate("fused_moe_fp8", {{"dtype", "bf16"}}, *Tree());
  REQUIRE(spec.ok());
  for (const char* other : {"sm_80", "sm_89", "sm_100a"}) {
    auto arch = ResolveArch(*GpuArch::Parse(other), spec->arch_families, spec->uri);
    INFO(other);
    REQUIRE(!arch.ok());
    CHECK(std::string(arch.status().message()).find("sm_90a") != std::string::npos);
  }
  auto fp16 = OpRegistry::Builtin().Generate("fused_moe_fp8", {{"dtype", "fp16"}}, *Tree());
  REQUIRE(!fp16.ok());
  CHECK(std::string(fp16.status().message()).find("fp16") != std::string::npos);
}

}  // namespace
}  // namespace kiln::kernels
