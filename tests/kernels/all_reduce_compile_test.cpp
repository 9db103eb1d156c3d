// Real NVRTC compiles of the comm family (ops all_reduce and all_reduce_add_rmsnorm) for
// sm_80 and sm_90a: every dtype x world size 2, 4, 8 of all_reduce (default and scalar vec),
// a spread of add_rmsnorm specializations, with ptxas' attributes checked against the launch
// hints. The kernels run only on GPUs with peers (tests elsewhere); here they must compile,
// export every entry, and keep their data in registers.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kernels/ops/comm/all_reduce_generator.h"
#include "server/jit/nvrtc_compiler.h"
#include "server/jit/pch_key.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

// Compiles `op` with `params` for `arch_text` and checks what every comm kernel promises.
// Returns the number of compiles (1).
int CompileAndCheck(const char* op, const Params& params, const char* arch_text, std::FILE* table) {
  auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
  INFO(op << ": " << spec.status().ToString());
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
  CHECK(result->link_ms == 0);

  REQUIRE(!spec->launch.empty());
  const int block = spec->launch[0].block;
  std::set<std::string> names;
  REQUIRE(result->kernels.size() == spec->entries.size());
  for (const server::KernelAttributes& k : result->kernels) {
    INFO(k.name);
    names.insert(k.name);
    CHECK(k.registers > 0);
    // __launch_bounds__(block, 512 / block): the block runs, and an SM holds 512 threads.
    CHECK(k.max_threads_per_block == block);
    CHECK(k.registers * std::max(block, 512) <= 65536);
    // The barrier's give-up flag and, for add_rmsnorm, the cross-warp partial sums: nothing
    // dynamic, nothing on the stack (the peer pointers stay in the parameter bank).
    CHECK(k.static_shared_bytes <= 4 + block / 32 * 4 + 16);
    CHECK(k.spill_store_bytes == 0);
    CHECK(k.spill_load_bytes == 0);
    CHECK(k.stack_bytes == 0);
    if (table != nullptr) {
      std::fprintf(table, "%-7s %-44s %-28s block %4d regs %3d smem %4d stack %4d cubin %7zu B compile %7.1f ms\n",
                   arch_text, spec->uri.c_str(), k.name.c_str(), block, k.registers, k.static_shared_bytes,
                   k.stack_bytes, result->cubin.size(), result->compile_ms);
    }
  }
  CHECK(names == std::set<std::string>(spec->entries.begin(), spec->entries.end()));
  return 1;
}

std::FILE* OpenTable() {
  const char* path = std::getenv("KILN_COMM_COMPILE_TABLE");
  return path != nullptr ? std::fopen(path, "a") : nullptr;
}

TEST_CASE("every all_reduce dtype x world size compiles for sm_80 and sm_90a with both entries", "[comm][compile]") {
  std::FILE* table = OpenTable();
  int compiled = 0;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (const std::string dtype : {"fp32", "fp16", "bf16"}) {
      for (int world : {2, 4, 8}) {
        for (const char* vec : {"auto", "1"}) {
          compiled += CompileAndCheck(
              "all_reduce", {{"dtype", dtype}, {"world_size", std::to_string(world)}, {"vec", vec}}, arch, table);
        }
      }
    }
  }
  // The other widths at one size.
  compiled += CompileAndCheck("all_reduce", {{"dtype", "bf16"}, {"world_size", "3"}, {"vec", "2"}}, "sm_90a", table);
  compiled += CompileAndCheck("all_reduce", {{"dtype", "fp16"}, {"world_size", "5"}, {"vec", "4"}}, "sm_90a", table);
  compiled += CompileAndCheck("all_reduce", {{"dtype", "fp32"}, {"world_size", "7"}, {"vec", "2"}}, "sm_80", table);
  if (table != nullptr) std::fclose(table);
  CHECK(compiled == 39);
}

TEST_CASE("all_reduce_add_rmsnorm specializations compile for sm_80 and sm_90a", "[comm][compile]") {
  std::FILE* table = OpenTable();
  struct Case {
    const char* dtype;
    int world;
    int hidden;
    const char* vec;
  };
  const Case cases[] = {
      {"bf16", 8, 4096, "auto"}, {"fp16", 2, 8192, "auto"}, {"fp32", 4, 16384, "auto"},
      {"bf16", 4, 16384, "1"},   {"fp32", 8, 16384, "1"},   {"bf16", 2, 1, "auto"},
      {"fp16", 8, 4095, "auto"}, {"bf16", 4, 5120, "2"},    {"fp32", 2, 96, "auto"},
  };
  int compiled = 0;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    for (const Case& c : cases) {
      compiled += CompileAndCheck("all_reduce_add_rmsnorm",
                                  {{"dtype", c.dtype},
                                   {"world_size", std::to_string(c.world)},
                                   {"hidden", std::to_string(c.hidden)},
                                   {"vec", c.vec}},
                                  arch, table);
    }
  }
  if (table != nullptr) std::fclose(table);
  CHECK(compiled == 18);
}

TEST_CASE("comm specs cannot be built below sm_80", "[comm][compile]") {
  for (const auto& [op, params] :
       {std::pair<const char*, Params>{"all_reduce", {{"dtype", "bf16"}, {"world_size", "8"}}},
        std::pair<const char*, Params>{"all_reduce_add_rmsnorm",
                                       {{"dtype", "bf16"}, {"world_size", "8"}, {"hidden", "4096"}}}}) {
    auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
    REQUIRE(spec.ok());
    auto arch = ResolveArch(*GpuArch::Parse("sm_75"), spec->arch_families, spec->uri);
    REQUIRE(!arch.ok());
    CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(arch.status().message()).find("sm_80+") != std::string::npos);
  }
}

TEST_CASE("every comm specialization of one op shares one PCH folder", "[comm][pch]") {
  // The units end their directive prefix before the rendered config, so the PCH key does not
  // depend on it (docs/adding-a-kernel.md, section 3).
  std::set<std::string> all_reduce, add_rmsnorm;
  for (const char* dtype : {"fp32", "bf16"}) {
    for (const char* world : {"2", "8"}) {
      auto spec = OpRegistry::Builtin().Generate("all_reduce", {{"dtype", dtype}, {"world_size", world}}, *Tree());
      REQUIRE(spec.ok());
      all_reduce.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
      for (const char* hidden : {"1", "4096", "16384"}) {
        auto fused = OpRegistry::Builtin().Generate(
            "all_reduce_add_rmsnorm", {{"dtype", dtype}, {"world_size", world}, {"hidden", hidden}}, *Tree());
        REQUIRE(fused.ok());
        add_rmsnorm.insert(server::PchKey(fused->units[0], *fused, Tree().get()));
      }
    }
  }
  CHECK(all_reduce.size() == 1);
  CHECK(add_rmsnorm.size() == 1);
}

TEST_CASE("a broken comm header fails the all_reduce compile with the log attached", "[comm][compile]") {
  CheckBrokenHeaderFailsWithLog("all_reduce", {{"dtype", "bf16"}, {"world_size", "8"}},
                                "include/kiln/comm/peer_barrier.cuh", "all_reduce_bf16_w8");
}

}  // namespace
}  // namespace kiln::kernels
