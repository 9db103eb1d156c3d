// Real NVRTC compiles of the diagnostics op tensor_stats: every dtype for sm_90a and for sm_80,
// with ptxas' attributes checked against the launch shape the generator promises (block,
// shared memory of one record per warp, no spills); a target below the family refused; one
// PCH for every specialization. 14 compiles. (GPU results are checked on a GPU machine.)
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kernels/ops/diag/tensor_stats_generator.h"
#include "server/jit/nvrtc_compiler.h"
#include "server/jit/pch_key.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

const char* const kDTypes[] = {"fp32", "fp16", "bf16", "int8", "uint8", "int32", "int64"};

using namespace compile_test;

void CompileAndCheck(const std::string& dtype, const char* arch_text) {
  auto spec = OpRegistry::Builtin().Generate("tensor_stats", {{"dtype", dtype}}, *Tree());
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
  CHECK(k.name == "kiln_tensor_stats");
  CHECK(k.max_threads_per_block == kTensorStatsBlock);  // __launch_bounds__(block)
  REQUIRE(spec->launch.size() == 1);
  CHECK(spec->launch[0].block == kTensorStatsBlock);
  CHECK(spec->launch[0].max_blocks == kTensorStatsMaxBlocks);
  CHECK(spec->launch[0].dynamic_smem == 0);
  // One 48-byte record per warp (kiln/diag/tensor_stats.cuh's block reduction), nothing else.
  CHECK(k.static_shared_bytes == kTensorStatsBlock / 32 * 48);
  CHECK(k.spill_store_bytes == 0);
  CHECK(k.spill_load_bytes == 0);
  CHECK(k.stack_bytes == 0);
  // __launch_bounds__(256, 8): a full SM of resident blocks, so at most 32 registers (CUDA
  // 13.0 gives exactly 32 to every dtype, without spills: see KILN_STATS_COMPILE_TABLE).
  CHECK(k.registers <= 32);
  // KILN_STATS_COMPILE_TABLE=<file>: one line per compile (registers, cubin size, time).
  if (const char* path = std::getenv("KILN_STATS_COMPILE_TABLE")) {
    if (std::FILE* table = std::fopen(path, "a")) {
      std::fprintf(table, "%-8s %-20s block %4d regs %3d smem %4d spill %d/%d cubin %6zu B compile %7.1f ms\n",
                   arch_text, spec->uri.c_str(), kTensorStatsBlock, k.registers, k.static_shared_bytes,
                   k.spill_store_bytes, k.spill_load_bytes, result->cubin.size(), result->compile_ms);
      std::fclose(table);
    }
  }
}

TEST_CASE("tensor_stats compiles for every dtype for sm_90a and sm_80 with sane attributes", "[diag][compile]") {
  for (const char* dtype : kDTypes) {
    CompileAndCheck(dtype, "sm_90a");
    CompileAndCheck(dtype, "sm_80");
  }
}

TEST_CASE("a tensor_stats spec cannot be built for a target below its family", "[diag][compile]") {
  auto spec = OpRegistry::Builtin().Generate("tensor_stats", {{"dtype", "bf16"}}, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse("sm_75"), spec->arch_families, spec->uri);
  REQUIRE(!arch.ok());
  CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(arch.status().message()).find("sm_80+") != std::string::npos);
  CHECK(std::string(arch.status().message()).find("tensor_stats_bf16") != std::string::npos);
}

TEST_CASE("every tensor_stats specialization shares one PCH folder", "[diag][pch]") {
  std::set<std::string> keys;
  for (const char* dtype : kDTypes) {
    auto spec = OpRegistry::Builtin().Generate("tensor_stats", {{"dtype", dtype}}, *Tree());
    REQUIRE(spec.ok());
    keys.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
  }
  CHECK(keys.size() == 1);
}

}  // namespace
}  // namespace kiln::kernels
