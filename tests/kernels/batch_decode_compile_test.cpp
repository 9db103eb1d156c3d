// Real NVRTC compiles of representative decode-family specializations for sm_90a (the GPU
// machine's arch) and one for sm_80 (the family's floor), with ptxas' attributes checked
// against the launch shape the generator promises: no spills, no stack (the schedule table
// is read from parameter space, never copied to local memory), the block the hints name.
// Kept to a handful of compiles: a few seconds in all. (Results are checked on a GPU.)
#include <catch2/catch.hpp>
#include <cstdio>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kernels/ops/decode/batch_decode_generator.h"
#include "server/jit/nvrtc_compiler.h"
#include "server/jit/pch_key.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

server::CompileResult MustCompile(const std::string& op, const Params& params, const char* arch_text) {
  auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse(arch_text), spec->arch_families, spec->uri);
  REQUIRE(arch.ok());
  CHECK(arch->str() == arch_text);
  auto result = Compiler().Compile(server::CompileRequest{&*spec, Tree().get(), *arch, {}, false, ""});
  INFO(spec->uri << " " << arch_text << ": " << result.status().ToString());
  REQUIRE(result.ok());
  REQUIRE(result->kernels.size() == spec->entries.size());
  for (const server::KernelAttributes& k : result->kernels) {
    INFO(spec->uri << " " << k.name << ": " << k.registers << " registers");
    CHECK(k.spill_store_bytes == 0);
    CHECK(k.spill_load_bytes == 0);
    CHECK(k.stack_bytes == 0);
    // The attention kernel's shared memory is all dynamic (the launch hint); the merge's warps
    // hand their shares to warp 0 through a small static array (3 warps x head_dim floats).
    CHECK(k.static_shared_bytes <= (k.name == "kiln_batch_decode_merge" ? 3 * 256 * 4 + 64 : 0));
  }
  if (std::getenv("KILN_DECODE_COMPILE_TABLE") != nullptr) {
    for (const server::KernelAttributes& k : result->kernels)
      std::printf("%-8s %-40s %-26s regs %3d compile %7.1f ms\n", arch_text, spec->uri.c_str(), k.name.c_str(),
                  k.registers, result->compile_ms);
  }
  return *std::move(result);
}

TEST_CASE("representative batch_decode specializations compile without spills", "[decode][compile]") {
  struct Case {
    const char* dtype;
    const char* head_dim;
    const char* group;
    const char* page_size;
    const char* soft_cap;
    const char* arch;
  };
  // The Llama-3.1-8B shape; the smallest head with the largest group, per-token gathers and the
  // soft cap; the largest head (most registers) with whole-page tiles; and the sm_80 floor.
  for (const Case& c : {Case{"bf16", "128", "4", "16", "0", "sm_90a"}, Case{"fp16", "64", "8", "1", "1", "sm_90a"},
                        Case{"bf16", "256", "1", "64", "0", "sm_90a"}, Case{"fp16", "128", "2", "16", "0", "sm_80"}}) {
    Params params = {{"dtype", c.dtype},
                     {"head_dim", c.head_dim},
                     {"group", c.group},
                     {"page_size", c.page_size},
                     {"soft_cap", c.soft_cap}};
    const server::CompileResult result = MustCompile("batch_decode", params, c.arch);
    const server::KernelAttributes& decode = result.kernels[0];
    const server::KernelAttributes& merge = result.kernels[1];
    CHECK(decode.name == "kiln_batch_decode");
    CHECK(merge.name == "kiln_batch_decode_merge");
    const BatchDecodeLaunchShape shape = ChooseBatchDecodeShape(std::stoi(c.head_dim));
    CHECK(decode.max_threads_per_block == shape.block);
    CHECK(merge.max_threads_per_block == shape.merge_block);
    // The pipeline's shared memory is within what one block may opt in to.
    CHECK(decode.max_dynamic_shared_bytes >= shape.dynamic_smem);
    // Two blocks of 128 threads per SM need at most 255 registers each; keep well below.
    CHECK(decode.registers <= 200);
  }
}

TEST_CASE("append_paged_kv compiles for every vector width without spills", "[decode][compile]") {
  for (const char* vec : {"8", "1"}) {
    const server::CompileResult result = MustCompile("append_paged_kv",
                                                     {{"dtype", "bf16"}, {"head_dim", "128"}, {"vec", vec}}, "sm_90a");
    CHECK(result.kernels[0].name == "kiln_append_paged_kv");
    CHECK(result.kernels[0].max_threads_per_block == 256);
  }
}

TEST_CASE("every decode-family specialization of a unit shares one PCH folder", "[decode][pch]") {
  std::set<std::string> decode_keys, append_keys;
  for (const char* dtype : {"fp16", "bf16"}) {
    for (const char* head_dim : {"64", "256"}) {
      for (const char* soft_cap : {"0", "1"}) {
        auto spec = OpRegistry::Builtin().Generate(
            "batch_decode",
            {{"dtype", dtype}, {"head_dim", head_dim}, {"group", "4"}, {"page_size", "16"}, {"soft_cap", soft_cap}},
            *Tree());
        REQUIRE(spec.ok());
        decode_keys.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
      }
      auto spec = OpRegistry::Builtin().Generate("append_paged_kv", {{"dtype", dtype}, {"head_dim", head_dim}},
                                                 *Tree());
      REQUIRE(spec.ok());
      append_keys.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
    }
  }
  CHECK(decode_keys.size() == 1);
  CHECK(append_keys.size() == 1);
}

TEST_CASE("a batch_decode spec cannot be built below sm_80", "[decode][compile]") {
  auto spec = OpRegistry::Builtin().Generate(
      "batch_decode", {{"dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"page_size", "16"}}, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse("sm_75"), spec->arch_families, spec->uri);
  REQUIRE(!arch.ok());
  CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(arch.status().message()).find("sm_80+") != std::string::npos);
}

}  // namespace
}  // namespace kiln::kernels
