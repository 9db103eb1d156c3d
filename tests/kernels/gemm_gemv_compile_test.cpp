// Real NVRTC compiles of gemm's small-M kernels (op gemm_gemv, its three entries): every (dtype,
// out_dtype) for sm_90a, with ptxas' attributes checked against the launch hints (kGemvThreads
// threads without spills or stack, shared memory only for the mma kernel's partial tiles,
// registers that let kGemvBlocksPerSm blocks share an SM); the
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
      REQUIRE(c.result.kernels.size() == 3);
      REQUIRE(c.spec.launch.size() == 3);
      for (const server::KernelAttributes& k : c.result.kernels) {
        INFO(c.spec.uri << " " << k.name << ": registers " << k.registers << " stack " << k.stack_bytes << " spills "
                        << k.spill_store_bytes << "/" << k.spill_load_bytes << " static smem "
                        << k.static_shared_bytes);
        CHECK((k.name == gemm::kGemmGemvEntry || k.name == gemm::kGemmGemvMmaEntry ||
               k.name == gemm::kGemmGemvMmaWideEntry));
        CHECK(k.stack_bytes == 0);
        CHECK(k.spill_store_bytes == 0);
        CHECK(k.spill_load_bytes == 0);
        // The mma kernel's partial tiles, 8 warps x up to 2 n-tiles x 16 x 8 fp32: 12 KiB with
        // both tile counts' arrays; the wide kernel's four n-tiles 16 KiB; the fp32 kernel none.
        if (k.name == gemm::kGemmGemvEntry) CHECK(k.static_shared_bytes == 0);
        else if (k.name == gemm::kGemmGemvMmaEntry) CHECK(k.static_shared_bytes <= 12 * 1024);
        else CHECK(k.static_shared_bytes <= 16 * 1024);
        CHECK(k.max_threads_per_block >= gemm::kGemvThreads);
        // 32 registers of loads in flight and the sums: measured 80 for both with CUDA 13.
        CHECK(k.registers * gemm::kGemvThreads * gemm::kGemvBlocksPerSm <= 65536);
      }
      for (const auto& launch : c.spec.launch) {
        CHECK(launch.block == gemm::kGemvThreads);
        CHECK(launch.items_per_block == gemm::kGemvColumnsPerBlock);
      }
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
