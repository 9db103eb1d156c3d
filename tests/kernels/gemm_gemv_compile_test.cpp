// Real NVRTC compiles of gemm's small-M kernel (op gemm_gemv): every (dtype, out_dtype) for
// sm_90a, with ptxas' attributes checked against the launch hint (kGemvThreads threads without
// spills or stack, no shared memory, registers that let kGemvBlocksPerSm blocks share an SM); the
// URI names both types and out_dtype auto is dtype; any other target is refused (sm_90a only, as
// the rest of gemm). The GPU checks results (tests/client/ops/gpu_gemm_test.cpp).
#include <catch2/catch.hpp>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/gemm/gemm_contract.h"
#include "server/jit/nvrtc_compiler.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

TEST_CASE("every gemm_gemv specialization compiles for sm_90a without spills", "[gemm][compile]") {
  int compiled = 0;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (const char* out : {"bf16", "fp16", "fp32"}) {
      const CompiledSpec c = GenerateAndCompile("gemm_gemv", {{"dtype", dtype}, {"out_dtype", out}}, "sm_90a");
      CHECK(c.spec.uri == std::string("gemm_gemv_") + dtype + "_o" + out);
      REQUIRE(c.result.kernels.size() == 1);
      const server::KernelAttributes& k = c.result.kernels[0];
      INFO(c.spec.uri << ": registers " << k.registers << " stack " << k.stack_bytes << " spills "
                      << k.spill_store_bytes << "/" << k.spill_load_bytes << " static smem " << k.static_shared_bytes);
      CHECK(k.name == gemm::kGemmGemvEntry);
      CHECK(k.stack_bytes == 0);
      CHECK(k.spill_store_bytes == 0);
      CHECK(k.spill_load_bytes == 0);
      CHECK(k.static_shared_bytes == 0);
      CHECK(k.max_threads_per_block >= gemm::kGemvThreads);
      // 32 registers of loads in flight and up to 8 sums: measured 80 with CUDA 13.
      CHECK(k.registers * gemm::kGemvThreads * gemm::kGemvBlocksPerSm <= 65536);
      REQUIRE(c.spec.launch.size() == 1);
      CHECK(c.spec.launch[0].block == gemm::kGemvThreads);
      CHECK(c.spec.launch[0].items_per_block == gemm::kGemvColumnsPerBlock);
      ++compiled;
    }
  }
  CHECK(compiled == 6);
  // out_dtype auto is dtype's: the same specialization.
  auto automatic = OpRegistry::Builtin().Generate("gemm_gemv", {{"dtype", "fp16"}}, *Tree());
  REQUIRE(automatic.ok());
  CHECK(automatic->uri == "gemm_gemv_fp16_ofp16");
  CHECK(automatic->params.at("out_dtype") == "fp16");
}

TEST_CASE("gemm_gemv compiles only for sm_90a, and says so for any other target", "[gemm][compile]") {
  auto spec = OpRegistry::Builtin().Generate("gemm_gemv", {{"dtype", "bf16"}}, *Tree());
  REQUIRE(spec.ok());
  for (const char* other : {"sm_80", "sm_89", "sm_100a"}) {
    auto arch = ResolveArch(*GpuArch::Parse(other), spec->arch_families, spec->uri);
    INFO(other);
    REQUIRE(!arch.ok());
    CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(arch.status().message()).find("sm_90a") != std::string::npos);
  }
  auto hopper = ResolveArch(*GpuArch::Parse("sm_90"), spec->arch_families, spec->uri);
  REQUIRE(hopper.ok());
  CHECK(hopper->str() == "sm_90a");
}

}  // namespace
}  // namespace kiln::kernels
