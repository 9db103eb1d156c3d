// Real NVRTC compiles of moe_unpermute: both dtypes for sm_90a and sm_80, with ptxas' attributes
// checked against the launch hint (256 threads without spills or stack, the token's indices and
// weights the only shared memory); both share one PCH folder; below sm_80 is refused. The GPU
// checks results (tests/client/ops/gpu_moe_unpermute_test.cpp).
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
  const CompiledSpec compiled = GenerateAndCompile("moe_unpermute", {{"dtype", dtype}}, arch_name);
  const server::CompileResult& result = compiled.result;
  REQUIRE(result.kernels.size() == 1);
  REQUIRE(compiled.spec.launch.size() == 1);
  const server::KernelAttributes& k = result.kernels[0];
  INFO(arch_name << " " << dtype << ": registers " << k.registers << " stack " << k.stack_bytes << " spills "
                 << k.spill_store_bytes << "/" << k.spill_load_bytes << " static smem " << k.static_shared_bytes
                 << " max threads " << k.max_threads_per_block);
  CHECK(k.name == moe::kMoeUnpermuteEntry);
  CHECK(k.stack_bytes == 0);
  CHECK(k.spill_store_bytes == 0);
  CHECK(k.spill_load_bytes == 0);
  CHECK(compiled.spec.launch[0].block == moe::kUnpermuteBlock);
  CHECK(k.max_threads_per_block >= moe::kUnpermuteBlock);
  // rows [kMaxTopK] int32 and weights [kMaxTopK] fp32
  CHECK(k.static_shared_bytes == 8 * moe::kMaxTopK);
  // Eight 16-byte loads in flight and eight fp32 sums: well under 128 registers, so two blocks of
  // 256 fit an SM's register file with room (measured 57 on sm_90 with CUDA 13).
  CHECK(k.registers <= 96);
}

TEST_CASE("both moe_unpermute specializations compile for sm_90a and sm_80 without spills", "[moe][compile]") {
  for (const char* dtype : {"bf16", "fp16"}) {
    CompileAndCheck("sm_90a", dtype);
    CompileAndCheck("sm_80", dtype);
  }
}

TEST_CASE("a moe_unpermute spec cannot be built below its family", "[moe][compile]") {
  auto spec = OpRegistry::Builtin().Generate("moe_unpermute", {{"dtype", "bf16"}}, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse("sm_75"), spec->arch_families, spec->uri);
  REQUIRE(!arch.ok());
  CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(arch.status().message()).find("sm_80+") != std::string::npos);
}

TEST_CASE("both moe_unpermute specializations share one PCH folder", "[moe][pch]") {
  std::set<std::string> keys;
  for (const char* dtype : {"bf16", "fp16"}) {
    auto spec = OpRegistry::Builtin().Generate("moe_unpermute", {{"dtype", dtype}}, *Tree());
    REQUIRE(spec.ok());
    keys.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
  }
  CHECK(keys.size() == 1);
}

}  // namespace
}  // namespace kiln::kernels
