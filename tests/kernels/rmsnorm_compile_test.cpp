// Real NVRTC compiles of the rmsnorm family: every dtype × a spread of hidden sizes × vec
// choices, for sm_80 and sm_90a, with ptxas' attributes checked against the launch shape
// the generator promises. (GPU results are checked on a GPU machine, not here.)
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kernels/ops/generator_support.h"
#include "kernels/ops/norm/rmsnorm_generator.h"
#include "server/jit/nvrtc_compiler.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

int DtypeBytes(const std::string& dtype) { return dtype == "fp32" ? 4 : 2; }

std::vector<int> VecChoices(int hidden, int bytes) {
  std::vector<int> all;
  for (int vec = 1; vec * bytes <= 16; vec *= 2) {
    if (hidden % vec == 0) all.push_back(vec);
  }
  if (hidden == 8 || hidden == 4096) return all;  // every choice at two sizes
  std::vector<int> some = {WidestVec(bytes, hidden)};
  if (some[0] != 1) some.push_back(1);  // the default and scalar access elsewhere
  return some;
}

TEST_CASE("every rmsnorm specialization compiles for sm_80 and sm_90a with sane attributes", "[rmsnorm][compile]") {
  std::FILE* table = std::getenv("KILN_RMSNORM_COMPILE_TABLE")
                         ? std::fopen(std::getenv("KILN_RMSNORM_COMPILE_TABLE"), "w")
                         : nullptr;
  int compiled = 0;
  for (const char* arch_text : {"sm_80", "sm_90a"}) {
    auto requested = GpuArch::Parse(arch_text);
    REQUIRE(requested.ok());
    for (const char* op : {"rmsnorm", "fused_add_rmsnorm"}) {
      for (const std::string dtype : {"fp32", "fp16", "bf16"}) {
        for (int hidden : {1, 3, 8, 4095, 4096, 5120, 65536}) {
          for (int vec : VecChoices(hidden, DtypeBytes(dtype))) {
            Params params = {{"dtype", dtype}, {"hidden", std::to_string(hidden)}, {"vec", std::to_string(vec)}};
            auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
            REQUIRE(spec.ok());
            auto arch = ResolveArch(*requested, spec->arch_families, spec->uri);
            REQUIRE(arch.ok());
            CHECK(arch->str() == arch_text);
            server::CompileRequest request{&*spec, Tree().get(), *arch, {}, false, ""};
            auto result = Compiler().Compile(request);
            INFO(spec->uri << " " << arch_text << ": " << result.status().ToString());
            REQUIRE(result.ok());
            ++compiled;
            CHECK(result->cubin.starts_with("\x7f"
                                            "ELF"));
            CHECK(result->log.find("ptxas info") == std::string::npos);
            CHECK(result->link_ms == 0);
            REQUIRE(result->kernels.size() == 1);
            const server::KernelAttributes& k = result->kernels[0];
            const RmsNormLaunchShape shape = ChooseRmsNormShape(hidden, vec, DtypeBytes(dtype));
            CHECK(k.name == spec->entries[0]);
            CHECK(k.registers > 0);
            // __launch_bounds__(block) caps the report, and the registers allow the block.
            CHECK(k.max_threads_per_block == shape.block);
            CHECK(spec->launch.at(0).block == shape.block);
            // Only the cross-warp partial sums live in shared memory; nothing dynamic.
            CHECK(k.static_shared_bytes <= (shape.threads_per_row > 32 ? shape.block / 32 * 4 : 0));
            CHECK(k.max_dynamic_shared_bytes > 0);
            CHECK(k.const_bytes > 0);
            // Where the row fits the registers __launch_bounds__(block) leaves (with 32 to
            // spare), nothing spills: only fp32 and scalar (vec 1) rows at hidden 65536 may.
            const int data_registers = shape.items_per_thread * std::max(1, vec * DtypeBytes(dtype) / 4);
            if (data_registers + 32 <= std::min(255, 65536 / shape.block)) {
              CHECK(k.spill_store_bytes == 0);
              CHECK(k.spill_load_bytes == 0);
              CHECK(k.stack_bytes == 0);
            }
            if (table != nullptr) {
              std::fprintf(table,
                           "%-8s %-36s block %4d rpb %3d ipt %2d regs %3d smem %4d spill %5d/%5d stack %5d cubin %6zu "
                           "B compile %7.1f ms\n",
                           arch_text, spec->uri.c_str(), shape.block, shape.rows_per_block, shape.items_per_thread,
                           k.registers, k.static_shared_bytes, k.spill_store_bytes, k.spill_load_bytes, k.stack_bytes,
                           result->cubin.size(), result->compile_ms);
            }
          }
        }
      }
    }
  }
  if (table != nullptr) std::fclose(table);
  CHECK(compiled > 100);
}

TEST_CASE("an rmsnorm spec cannot be built for a target below its family", "[rmsnorm][compile]") {
  auto spec = OpRegistry::Builtin().Generate("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}}, *Tree());
  REQUIRE(spec.ok());
  auto arch = ResolveArch(*GpuArch::Parse("sm_75"), spec->arch_families, spec->uri);
  REQUIRE(!arch.ok());
  CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(arch.status().message()).find("sm_80+") != std::string::npos);
}

TEST_CASE("an edit of the device code is compiled by the next request", "[rmsnorm][compile]") {
  // The generator copies the unit's bytes from the snapshot it is given; a broken unit in a
  // (changed) snapshot fails as a library compile error, FAILED_PRECONDITION with the log.
  TreeSnapshot broken = *Tree();
  broken.files["include/kiln/norm/rmsnorm.cuh"] += "\nthis is not C++;\n";
  auto spec = OpRegistry::Builtin().Generate("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}}, broken);
  REQUIRE(spec.ok());
  server::CompileRequest request{&*spec, &broken, *GpuArch::Parse("sm_90a"), {}, false, "/gen/rmsnorm_bf16_h4096"};
  auto result = Compiler().Compile(request);
  REQUIRE(!result.ok());
  CHECK(result.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string message(result.status().message());
  CHECK(message.find("rmsnorm_bf16_h4096") != std::string::npos);
  CHECK(message.find("sm_90a") != std::string::npos);
  CHECK(message.find("/gen/rmsnorm_bf16_h4096") != std::string::npos);
  CHECK(message.find("kiln/norm/rmsnorm.cuh") != std::string::npos);
  auto log = server::CompileLog(result.status());
  REQUIRE(log.has_value());
  CHECK(log->find("error") != std::string::npos);
}

}  // namespace
}  // namespace kiln::kernels

namespace kiln::kernels {
namespace {

// Not a test: writes cubins and a manifest for the GPU check (tests/kernels/gpu/
// rmsnorm_gpu_check.py) into $KILN_RMSNORM_BUNDLE_DIR, for the arch in $KILN_RMSNORM_BUNDLE_ARCH
// (default sm_90a). Run with "[.bundle]".
TEST_CASE("write rmsnorm cubins for a GPU check", "[.bundle]") {
  const char* dir = std::getenv("KILN_RMSNORM_BUNDLE_DIR");
  REQUIRE(dir != nullptr);
  const char* arch_text = std::getenv("KILN_RMSNORM_BUNDLE_ARCH") ? std::getenv("KILN_RMSNORM_BUNDLE_ARCH") : "sm_90a";
  std::FILE* manifest = std::fopen((std::string(dir) + "/manifest.tsv").c_str(), "w");
  REQUIRE(manifest != nullptr);
  for (const char* op : {"rmsnorm", "fused_add_rmsnorm"}) {
    for (const std::string dtype : {"fp32", "fp16", "bf16"}) {
      for (int hidden : {1, 2, 3, 8, 24, 32, 96, 128, 256, 1000, 1024, 4095, 4096, 5120, 8192, 16384, 32768, 65536}) {
        std::vector<int> vecs = {WidestVec(DtypeBytes(dtype), hidden)};
        if (vecs[0] != 1) vecs.push_back(1);
        if (hidden == 4096 || hidden == 8) vecs = VecChoices(hidden, DtypeBytes(dtype));
        for (int vec : vecs) {
          Params params = {{"dtype", dtype}, {"hidden", std::to_string(hidden)}, {"vec", std::to_string(vec)}};
          auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
          REQUIRE(spec.ok());
          auto arch = ResolveArch(*GpuArch::Parse(arch_text), spec->arch_families, spec->uri);
          REQUIRE(arch.ok());
          auto result = Compiler().Compile(server::CompileRequest{&*spec, Tree().get(), *arch, {}, false, ""});
          REQUIRE(result.ok());
          std::FILE* cubin = std::fopen((std::string(dir) + "/" + spec->uri + ".cubin").c_str(), "wb");
          REQUIRE(cubin != nullptr);
          std::fwrite(result->cubin.data(), 1, result->cubin.size(), cubin);
          std::fclose(cubin);
          std::fprintf(manifest, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", spec->uri.c_str(), op, dtype.c_str(), hidden, vec,
                       std::to_string(spec->launch.at(0).block).c_str(),
                       std::to_string(spec->launch.at(0).items_per_block).c_str(), spec->entries[0].c_str());
        }
      }
    }
  }
  std::fclose(manifest);
}

}  // namespace
}  // namespace kiln::kernels
