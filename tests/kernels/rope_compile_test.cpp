// Real NVRTC compiles of representative rope specializations (both ops, fp16/bf16, NeoX/GPT-J,
// int32/int64 positions, 16-byte and scalar vectors, rotary dims 64..512) for sm_90a and one
// set for sm_80, with ptxas' attributes checked against the launch hints; every specialization
// of an op shares one PCH folder. A few seconds in all: the GPU tests compile the rest.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kernels/ops/rope/rope_generator.h"
#include "server/jit/nvrtc_compiler.h"
#include "server/jit/pch_key.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

struct Case {
  const char* op;
  const char* dtype;
  int rotary_dim;
  const char* style;
  const char* pos_dtype;
  const char* vec;
};

void CompileAndCheck(const Case& c, const char* arch_text, std::FILE* table) {
  const Params params = {{"dtype", c.dtype},
                         {"rotary_dim", std::to_string(c.rotary_dim)},
                         {"style", c.style},
                         {"pos_dtype", c.pos_dtype},
                         {"vec", c.vec}};
  auto spec = OpRegistry::Builtin().Generate(c.op, params, *Tree());
  INFO(c.op << ": " << spec.status().ToString());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse(arch_text), spec->arch_families, spec->uri);
  REQUIRE(arch.ok());
  CHECK(arch->str() == arch_text);
  auto result = Compiler().Compile(server::CompileRequest{&*spec, Tree().get(), *arch, {}, false, ""});
  INFO(spec->uri << " " << arch_text << ": " << result.status().ToString());
  REQUIRE(result.ok());
  CHECK(result->cubin.starts_with("\x7f"
                                  "ELF"));
  CHECK(result->log.find("ptxas info") == std::string::npos);
  REQUIRE(result->kernels.size() == 1);
  const server::KernelAttributes& k = result->kernels[0];
  const int block = spec->launch.at(0).block;
  CHECK(k.name == spec->entries[0]);
  CHECK(k.max_threads_per_block == block);
  // Two heads in flight, cos/sin of 8 pairs and the rotation fit well within 128 registers
  // (64 measured for bf16 rotary 128); nothing spills, nothing on the stack.
  CHECK(k.registers <= 128);
  CHECK(k.spill_store_bytes == 0);
  CHECK(k.spill_load_bytes == 0);
  CHECK(k.stack_bytes == 0);
  // apply_rope keeps the table of rotary_dim / 2 doubles in shared memory; the cache op none.
  const bool cache = std::string(c.op) == "apply_rope_with_cos_sin_cache";
  CHECK(k.static_shared_bytes == (cache ? 0 : c.rotary_dim / 2 * 8));
  if (table != nullptr) {
    std::fprintf(table, "%-7s %-52s block %4d regs %3d smem %5d cubin %6zu B compile %7.1f ms\n", arch_text,
                 spec->uri.c_str(), block, k.registers, k.static_shared_bytes, result->cubin.size(),
                 result->compile_ms);
  }
}

TEST_CASE("representative rope specializations compile for sm_90a and sm_80 with sane attributes", "[rope][compile]") {
  const char* path = std::getenv("KILN_ROPE_COMPILE_TABLE");
  std::FILE* table = path != nullptr ? std::fopen(path, "w") : nullptr;
  const Case sm90[] = {
      {"apply_rope", "bf16", 128, "neox", "int64", "auto"},
      {"apply_rope", "fp16", 128, "gptj", "int32", "auto"},
      {"apply_rope", "bf16", 64, "gptj", "int64", "1"},
      {"apply_rope", "fp16", 512, "neox", "int32", "1"},     // 256 threads per token
      {"apply_rope", "bf16", 100, "neox", "int64", "auto"},  // vec 2, 25 threads per token
      {"apply_rope_with_cos_sin_cache", "bf16", 128, "neox", "int64", "auto"},
      {"apply_rope_with_cos_sin_cache", "fp16", 256, "gptj", "int32", "auto"},
      {"apply_rope_with_cos_sin_cache", "bf16", 64, "neox", "int32", "2"},
  };
  for (const Case& c : sm90) CompileAndCheck(c, "sm_90a", table);
  const Case sm80[] = {
      {"apply_rope", "bf16", 128, "neox", "int64", "auto"},
      {"apply_rope_with_cos_sin_cache", "fp16", 128, "gptj", "int32", "auto"},
  };
  for (const Case& c : sm80) CompileAndCheck(c, "sm_80", table);
  if (table != nullptr) std::fclose(table);
}

TEST_CASE("rope specs cannot be built below sm_80", "[rope][compile]") {
  auto spec = OpRegistry::Builtin().Generate("apply_rope", {{"dtype", "fp16"}, {"rotary_dim", "128"}}, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse("sm_75"), spec->arch_families, spec->uri);
  REQUIRE(!arch.ok());
  CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(arch.status().message()).find("sm_80+") != std::string::npos);
}

TEST_CASE("every rope specialization of one op shares one PCH folder", "[rope][pch]") {
  // The unit ends its directive prefix before the rendered config (docs/adding-a-kernel.md, 3).
  for (const char* op : {"apply_rope", "apply_rope_with_cos_sin_cache"}) {
    std::set<std::string> keys;
    for (const char* dtype : {"fp16", "bf16"})
      for (const char* rotary : {"64", "128", "512"})
        for (const char* style : {"neox", "gptj"})
          for (const char* pos : {"int32", "int64"}) {
            auto spec = OpRegistry::Builtin().Generate(
                op, {{"dtype", dtype}, {"rotary_dim", rotary}, {"style", style}, {"pos_dtype", pos}}, *Tree());
            REQUIRE(spec.ok());
            keys.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
          }
    INFO(op);
    CHECK(keys.size() == 1);
  }
}

TEST_CASE("a broken rope header fails the compile with the log attached", "[rope][compile]") {
  CheckBrokenHeaderFailsWithLog("apply_rope", {{"dtype", "bf16"}, {"rotary_dim", "128"}}, "include/kiln/rope/rope.cuh",
                                "apply_rope_bf16_r128_neox_i64");
}

}  // namespace
}  // namespace kiln::kernels
