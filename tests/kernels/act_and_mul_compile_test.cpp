// Real NVRTC compiles of the activation family: every op × dtype at the default vec (16
// bytes) and at vec 1 (odd d) for sm_90a, one per op for sm_80, with ptxas' attributes
// checked against the launch shape the generator promises; and one PCH for the whole family.
// 15 compiles: about 2 s. (GPU results are checked on a GPU machine, not here.)
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kernels/ops/activation/act_and_mul_generator.h"
#include "server/jit/nvrtc_compiler.h"
#include "server/jit/pch_key.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

void CompileAndCheck(const std::string& op, const std::string& dtype, int vec, const char* arch_text) {
  Params params = {{"dtype", dtype}, {"vec", std::to_string(vec)}};
  auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse(arch_text), spec->arch_families, spec->uri);
  REQUIRE(arch.ok());
  CHECK(arch->str() == arch_text);
  auto result = Compiler().Compile(server::CompileRequest{&*spec, Tree().get(), *arch, {}, false, ""});
  INFO(spec->uri << " " << arch_text << ": " << result.status().ToString());
  REQUIRE(result.ok());
  CHECK(result->cubin.starts_with("\x7f"
                                  "ELF"));
  REQUIRE(result->kernels.size() == 1);
  const server::KernelAttributes& k = result->kernels[0];
  const ActAndMulLaunchShape shape = ChooseActAndMulShape(vec, 2);
  CHECK(k.name == spec->entries[0]);
  CHECK(k.max_threads_per_block == shape.block);  // __launch_bounds__(block)
  CHECK(spec->launch.at(0).block == shape.block);
  CHECK(spec->launch.at(0).items_per_block == shape.cols_per_block);
  CHECK(k.static_shared_bytes == 0);
  // Every vector a thread holds stays in registers, and few enough registers that at least 7
  // blocks of 128 threads share an SM (CUDA 13.0: 48-55 at vec 8, 62-64 at vec 1).
  CHECK(k.spill_store_bytes == 0);
  CHECK(k.spill_load_bytes == 0);
  CHECK(k.stack_bytes == 0);
  CHECK(k.registers <= 72);
  // KILN_ACT_COMPILE_TABLE=<file>: one line per compile (registers, cubin size, time).
  if (const char* path = std::getenv("KILN_ACT_COMPILE_TABLE")) {
    if (std::FILE* table = std::fopen(path, "a")) {
      std::fprintf(table,
                   "%-8s %-28s block %4d items %2d cols %5d regs %3d spill %d/%d cubin %6zu B compile %7.1f ms\n",
                   arch_text, spec->uri.c_str(), shape.block, shape.items_per_thread, shape.cols_per_block, k.registers,
                   k.spill_store_bytes, k.spill_load_bytes, result->cubin.size(), result->compile_ms);
      std::fclose(table);
    }
  }
}

TEST_CASE("activation specializations compile for sm_90a and sm_80 with sane attributes", "[activation][compile]") {
  for (const char* op : {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"}) {
    for (const char* dtype : {"fp16", "bf16"}) {
      for (int vec : {8, 1}) CompileAndCheck(op, dtype, vec, "sm_90a");
    }
    CompileAndCheck(op, "bf16", 4, "sm_80");
  }
}

TEST_CASE("an activation spec cannot be built for a target below its family", "[activation][compile]") {
  auto spec = OpRegistry::Builtin().Generate("silu_and_mul", {{"dtype", "bf16"}}, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse("sm_75"), spec->arch_families, spec->uri);
  REQUIRE(!arch.ok());
  CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(arch.status().message()).find("sm_80+") != std::string::npos);
  CHECK(std::string(arch.status().message()).find("silu_and_mul_bf16") != std::string::npos);
}

TEST_CASE("every activation specialization shares one PCH folder", "[activation][pch]") {
  std::set<std::string> keys;
  for (const char* op : {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"}) {
    for (const char* dtype : {"fp16", "bf16"}) {
      for (const char* vec : {"1", "8"}) {
        auto spec = OpRegistry::Builtin().Generate(op, {{"dtype", dtype}, {"vec", vec}}, *Tree());
        REQUIRE(spec.ok());
        keys.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
      }
    }
  }
  CHECK(keys.size() == 1);
}

}  // namespace
}  // namespace kiln::kernels
