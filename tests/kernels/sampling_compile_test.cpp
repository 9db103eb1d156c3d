// Real NVRTC compiles of the sampling family: each op once for sm_90a, the samples dtypes and
// vector widths spread over them, and one sm_80 build, with ptxas' attributes
// checked against the launch hints (1024 threads, the 64 registers that leaves, no local
// memory, static shared memory well below what the 64 KiB dynamic part leaves). Also: every
// specialization shares one PCH folder. About six seconds of NVRTC in all; the GPU checks
// results (tests/client/ops/gpu_sampling_test.cpp).
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/sampling/sampling_contract.h"
#include "server/jit/nvrtc_compiler.h"
#include "server/jit/pch_key.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

struct Build {
  const char* arch;
  const char* op;
  const char* out;
  const char* vec;
  const char* cluster = "1";
};

TEST_CASE("representative sampling specializations compile with the promised attributes", "[sampling][compile]") {
  // Every op, both samples dtypes and every vector width at least once; top_k_top_p (the
  // largest unit, ~1.5 s of ptxas) once per block per row and once over a cluster.
  const Build builds[] = {
      {"sm_90a", "top_k_sampling", "int32", "4"},
      {"sm_90a", "top_p_sampling", "int64", "1"},
      {"sm_90a", "top_k_top_p_sampling", "int32", "4"},
      {"sm_90a", "min_p_sampling", "int64", "2"},
      {"sm_90a", "argmax", "int32", "1"},
      {"sm_80", "min_p_sampling", "int32", "4"},
      // A row over a cluster (sm_90+): distributed shared memory and cluster barriers.
      {"sm_90a", "top_p_sampling", "int32", "4", "8"},
      {"sm_90a", "top_k_top_p_sampling", "int64", "4", "4"},
      {"sm_90", "min_p_sampling", "int32", "2", "2"},
      {"sm_90a", "argmax", "int32", "4", "8"},
  };
  for (const Build& b : builds) {
    auto spec = OpRegistry::Builtin().Generate(b.op, {{"out_dtype", b.out}, {"vec", b.vec}, {"cluster", b.cluster}},
                                               *Tree());
    REQUIRE(spec.ok());
    auto arch = ResolveArch(*GpuArch::Parse(b.arch), spec->arch_families, spec->uri);
    REQUIRE(arch.ok());
    CHECK(arch->str() == b.arch);
    auto result = Compiler().Compile(server::CompileRequest{&*spec, Tree().get(), *arch, {}, false, ""});
    INFO(spec->uri << " " << b.arch << ": " << result.status().ToString());
    REQUIRE(result.ok());
    CHECK(result->cubin.starts_with("\x7f"
                                    "ELF"));
    REQUIRE(result->kernels.size() == 1);
    const server::KernelAttributes& k = result->kernels[0];
    INFO("registers " << k.registers << " stack " << k.stack_bytes << " spills " << k.spill_store_bytes << "/"
                      << k.spill_load_bytes << " static smem " << k.static_shared_bytes);
    CHECK(k.name == spec->entries[0]);
    CHECK(k.max_threads_per_block == sampling::kBlock);
    REQUIRE(spec->launch.size() == 1);
    CHECK(spec->launch[0].block == sampling::kBlock);
    CHECK(k.registers <= 64);  // __launch_bounds__(1024, 1)
    // The scratch of the block scans and reductions only; the histograms and the list are the
    // dynamic 96 KiB, which the opt-in limit of sm_80+ (163 KiB and more) allows.
    CHECK(k.static_shared_bytes < 1024);
    CHECK(k.max_dynamic_shared_bytes >= spec->launch[0].dynamic_smem);
    // top_k_top_p keeps more values live across its two selections than 64 registers hold
    // and spills a few words outside the row loops; everything else stays in registers.
    if (std::string(b.op) != "top_k_top_p_sampling") {
      CHECK(k.stack_bytes == 0);
      CHECK(k.spill_store_bytes == 0);
    } else {
      CHECK(k.stack_bytes <= 64);
    }
  }
}

TEST_CASE("a sampling spec cannot be built below its family", "[sampling][compile]") {
  auto spec = OpRegistry::Builtin().Generate("argmax", {}, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse("sm_75"), spec->arch_families, spec->uri);
  REQUIRE(!arch.ok());
  CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(arch.status().message()).find("sm_80+") != std::string::npos);
}

TEST_CASE("every sampling specialization shares one PCH folder", "[sampling][pch]") {
  std::set<std::string> keys;
  for (const char* op : {"top_k_sampling", "top_p_sampling", "top_k_top_p_sampling", "min_p_sampling", "argmax"}) {
    for (const char* out : {"int32", "int64"}) {
      for (const char* vec : {"1", "4"}) {
        auto spec = OpRegistry::Builtin().Generate(op, {{"out_dtype", out}, {"vec", vec}}, *Tree());
        REQUIRE(spec.ok());
        keys.insert(server::PchKey(spec->units[0], *spec, Tree().get()));
      }
    }
  }
  CHECK(keys.size() == 1);
}

}  // namespace
}  // namespace kiln::kernels
