// Real NVRTC compiles of representative prefill specializations for sm_90a, with ptxas'
// attributes checked against the launch shape the contract promises: no spills, no stack (the
// schedule is read from parameter space), the block and shared memory the hints name, and the
// one sm_90a family (another arch is refused before compiling). Results are checked on a GPU.
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/prefill/prefill_contract.h"
#include "server/jit/nvrtc_compiler.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

TEST_CASE("representative batch_prefill specializations compile without spills", "[prefill][compile]") {
  struct Case {
    const char* op;
    const char* dtype;
    const char* head_dim;
    const char* group;
    const char* causal;
    const char* soft_cap;
    const char* page_size;  // paged only
    const char* tile_rows;  // "": auto
  };
  // The Llama-3.1-8B shape both ways and as speculative verification (the mma.sync kernel's
  // 64-row tiles at head_dim 128); the smallest head with the largest group, the soft cap and
  // per-token pages, on both kernels; the largest head (most registers) not causal with
  // whole-page tiles.
  for (const Case& c : {Case{"batch_prefill_ragged", "bf16", "128", "4", "1", "0", "", ""},
                        Case{"batch_prefill_paged", "bf16", "128", "4", "1", "0", "16", ""},
                        Case{"batch_prefill_paged", "bf16", "128", "4", "1", "0", "16", "64"},
                        Case{"batch_prefill_paged", "fp16", "64", "8", "1", "1", "1", ""},
                        Case{"batch_prefill_paged", "fp16", "64", "8", "1", "1", "1", "64"},
                        Case{"batch_prefill_ragged", "bf16", "256", "1", "0", "0", "", ""},
                        Case{"batch_prefill_paged", "fp16", "256", "2", "1", "1", "64", ""}}) {
    Params params = {{"dtype", c.dtype},
                     {"head_dim", c.head_dim},
                     {"group", c.group},
                     {"causal", c.causal},
                     {"soft_cap", c.soft_cap}};
    if (*c.page_size != '\0') params["page_size"] = c.page_size;
    if (*c.tile_rows != '\0') params["tile_rows"] = c.tile_rows;
    auto spec = OpRegistry::Builtin().Generate(c.op, params, *Tree());
    REQUIRE(spec.ok());
    const int head_dim = std::stoi(c.head_dim);
    const int tile_rows = *c.tile_rows != '\0' ? std::stoi(c.tile_rows) : prefill::DefaultTileRows(head_dim);
    auto arch = ResolveArch(*GpuArch::Parse("sm_90a"), spec->arch_families, spec->uri);
    REQUIRE(arch.ok());
    auto result = Compiler().Compile(server::CompileRequest{&*spec, Tree().get(), *arch, {}, false, ""});
    INFO(spec->uri << ": " << result.status().ToString());
    REQUIRE(result.ok());
    REQUIRE(result->kernels.size() == 2);
    for (const server::KernelAttributes& k : result->kernels) {
      INFO(spec->uri << " " << k.name << ": " << k.registers << " registers");
      CHECK(k.spill_store_bytes == 0);
      CHECK(k.spill_load_bytes == 0);
      CHECK(k.stack_bytes == 0);
      if (std::getenv("KILN_PREFILL_COMPILE_TABLE") != nullptr)
        std::printf("%-52s %-26s regs %3d smem %6d compile %7.1f ms\n", spec->uri.c_str(), k.name.c_str(), k.registers,
                    k.static_shared_bytes, result->compile_ms);
    }
    const server::KernelAttributes& attend = result->kernels[0];
    CHECK(attend.name == "kiln_batch_prefill");
    CHECK(result->kernels[1].name == "kiln_batch_prefill_merge");
    CHECK(attend.max_threads_per_block == prefill::PrefillThreads(tile_rows));
    CHECK(attend.max_dynamic_shared_bytes >= prefill::PrefillSmemBytes(head_dim, tile_rows));
    CHECK(result->kernels[1].max_threads_per_block == prefill::kMergeThreads);
  }
}

// Every specialization of the ragged op (dtype x head dim x group x causal x soft cap: 96), and
// the paged addressing at page sizes 1, 16 and 256 for every head dim with the most live state
// (group 8, soft cap; causal and not): all compile for sm_90a with no spill and no stack, so no
// specialization a caller can ask for fails or slows down at its first call. Three cases of a
// minute or two each, so that ctest runs them side by side.
void CompilesClean(const std::string& op, const Params& params) {
  auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse("sm_90a"), spec->arch_families, spec->uri);
  REQUIRE(arch.ok());
  auto result = Compiler().Compile(server::CompileRequest{&*spec, Tree().get(), *arch, {}, false, ""});
  INFO(spec->uri << ": " << result.status().ToString());
  REQUIRE(result.ok());
  // page_size 1 once spilled 28 bytes in the Hopper kernel's producer (a page-table lookup per
  // K/V row under 56 registers); the page ids are staged in shared memory now, and no
  // specialization spills.
  for (const server::KernelAttributes& k : result->kernels) {
    INFO(spec->uri << " " << k.name << ": " << k.registers << " registers");
    CHECK(k.spill_store_bytes == 0);
    CHECK(k.spill_load_bytes == 0);
    CHECK(k.stack_bytes == 0);
  }
}

void EveryRaggedSpecialization(const char* dtype) {
  for (const char* head_dim : {"64", "128", "256"})
    for (const char* group : {"1", "2", "4", "8"})
      for (const char* causal : {"0", "1"})
        for (const char* soft_cap : {"0", "1"})
          CompilesClean(
              "batch_prefill_ragged",
              {{"dtype", dtype}, {"head_dim", head_dim}, {"group", group}, {"causal", causal}, {"soft_cap", soft_cap}});
}

TEST_CASE("every fp16 batch_prefill_ragged specialization compiles for sm_90a without spills", "[prefill][compile]") {
  EveryRaggedSpecialization("fp16");
}

TEST_CASE("every bf16 batch_prefill_ragged specialization compiles for sm_90a without spills", "[prefill][compile]") {
  EveryRaggedSpecialization("bf16");
}

TEST_CASE("batch_prefill_paged compiles for every head dim at pages of 1 to 256 tokens without spills",
          "[prefill][compile]") {
  // 8: the smallest page the TMA producer loads (a load per lane of its warp at head_dim 128).
  for (const char* head_dim : {"64", "128", "256"})
    for (const char* page_size : {"1", "8", "16", "256"})
      for (const char* causal : {"0", "1"})
        CompilesClean("batch_prefill_paged", {{"dtype", "bf16"},
                                              {"head_dim", head_dim},
                                              {"group", "8"},
                                              {"causal", causal},
                                              {"soft_cap", "1"},
                                              {"page_size", page_size}});
}

TEST_CASE("the mma.sync kernel compiles at head_dim 64 and 128 for the plan's short requests without spills",
          "[prefill][compile]") {
  for (const char* head_dim : {"64", "128"})
    for (const char* group : {"1", "4", "8"})
      CompilesClean("batch_prefill_paged", {{"dtype", "bf16"},
                                            {"head_dim", head_dim},
                                            {"group", group},
                                            {"causal", "1"},
                                            {"soft_cap", "1"},
                                            {"page_size", "16"},
                                            {"tile_rows", "64"}});
}

TEST_CASE("a batch_prefill spec is built for sm_90a only", "[prefill][compile]") {
  auto spec = OpRegistry::Builtin().Generate(
      "batch_prefill_ragged", {{"dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"causal", "1"}}, *Tree());
  REQUIRE(spec.ok());
  for (const char* other : {"sm_80", "sm_89", "sm_100"}) {
    auto arch = ResolveArch(*GpuArch::Parse(other), spec->arch_families, spec->uri);
    INFO(other);
    REQUIRE(!arch.ok());
    CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(arch.status().message()).find("sm_90a") != std::string::npos);
  }
}

}  // namespace
}  // namespace kiln::kernels
