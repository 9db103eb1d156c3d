// Real NVRTC compiles of fp8_gemm's small-M kernel (op fp8_gemm_gemv, one entry): both out_dtypes
// for sm_90a, with ptxas' attributes checked against the launch hints (kGemvThreads threads
// without spills or stack, static shared memory only for the k parts' totals, registers that let
// kFp8GemvBlocksPerSm blocks share an SM); the URI names the output type and out_dtype defaults to
// bf16; any other target is refused (sm_90a only, as the rest of fp8_gemm). The GPU checks results
// (tests/client/ops/gpu_fp8_gemm_test.cpp).
#include <catch2/catch.hpp>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/gemm/gemm_contract.h"
#include "server/jit/nvrtc_compiler.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

TEST_CASE("every fp8_gemm_gemv specialization compiles for sm_90a without spills", "[gemm][fp8][compile]") {
  int compiled = 0;
  for (const char* out : {"bf16", "fp32"}) {
    const CompiledSpec c = GenerateAndCompile("fp8_gemm_gemv", {{"out_dtype", out}}, "sm_90a");
    CHECK(c.spec.uri == std::string("fp8_gemm_gemv_e4m3_o") + out);
    REQUIRE(c.result.kernels.size() == 2);
    REQUIRE(c.spec.launch.size() == 2);
    for (const server::KernelAttributes& k : c.result.kernels) {
      INFO(c.spec.uri << " " << k.name << ": registers " << k.registers << " stack " << k.stack_bytes << " spills "
                      << k.spill_store_bytes << "/" << k.spill_load_bytes << " static smem " << k.static_shared_bytes);
      const bool wide = k.name == gemm::kFp8GemmGemvWideEntry;
      CHECK((wide || k.name == gemm::kFp8GemmGemvEntry));
      CHECK(k.stack_bytes == 0);
      CHECK(k.spill_store_bytes == 0);
      CHECK(k.spill_load_bytes == 0);
      // The k parts' totals: 8 warps x 32 lanes x 4 floats an n-tile.
      CHECK(k.static_shared_bytes == gemm::kGemvWarps * 32 * 4 * 4 * (wide ? 2 : 1));
      CHECK(k.max_threads_per_block >= gemm::kGemvThreads);
      CHECK(k.registers * gemm::kGemvThreads * gemm::kFp8GemvBlocksPerSm <= 65536);
    }
    for (const auto& launch : c.spec.launch) {
      CHECK(launch.block == gemm::kGemvThreads);
      CHECK(launch.items_per_block == gemm::Fp8GemvBlockRows(gemm::kFp8GemvMinKParts));
    }
    ++compiled;
  }
  CHECK(compiled == 2);
  auto automatic = OpRegistry::Builtin().Generate("fp8_gemm_gemv", {}, *Tree());
  REQUIRE(automatic.ok());
  CHECK(automatic->uri == "fp8_gemm_gemv_e4m3_obf16");
}

TEST_CASE("fp8_gemm_gemv compiles only for sm_90a, and says so for any other target", "[gemm][fp8][compile]") {
  auto spec = OpRegistry::Builtin().Generate("fp8_gemm_gemv", {}, *Tree());
  REQUIRE(spec.ok());
  for (const char* other : {"sm_80", "sm_89", "sm_100a"}) {
    auto arch = ResolveArch(*GpuArch::Parse(other), spec->arch_families, spec->uri);
    INFO(other);
    REQUIRE(!arch.ok());
    CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(arch.status().message()).find("sm_90a") != std::string::npos);
  }
}

// The k parts: the fewest whose grid covers the SMs, 8 where none does; the rows of a block.
TEST_CASE("fp8_gemm_gemv's k parts cover the SMs with the fewest parts", "[gemm][fp8]") {
  CHECK(gemm::Fp8GemvBlockRows(2) == 64);
  CHECK(gemm::Fp8GemvBlockRows(4) == 32);
  CHECK(gemm::Fp8GemvBlockRows(8) == 16);
  CHECK(gemm::Fp8GemvKParts(28672, 132) == 2);  // Llama-3.1-8B gate-up: 448 blocks
  CHECK(gemm::Fp8GemvKParts(6144, 132) == 4);   // qkv: 96 blocks of 64 rows, 192 of 32
  CHECK(gemm::Fp8GemvKParts(4096, 132) == 8);   // o and down: 128 blocks of 32 rows, 256 of 16
  CHECK(gemm::Fp8GemvKParts(16, 132) == 8);
  CHECK(gemm::Fp8GemvKParts(64 * 132, 132) == 2);
  CHECK(gemm::Fp8GemvKParts(64 * 132 - 16, 132) == 2);  // the last block partly past N
  CHECK(gemm::Fp8GemvKParts(64 * 131, 132) == 4);
}

}  // namespace
}  // namespace kiln::kernels
