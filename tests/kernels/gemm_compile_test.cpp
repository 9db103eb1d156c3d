// The gemm family on the CPU: the tactic space enumerated (what fits is generated, the rest is
// refused naming the limit), real NVRTC compiles of every tile at its most stages for both
// input types with ptxas' attributes checked against the launch hints, the sm_90a-only arch
// rule, and the generated wgmma header in step with its script. (GPU results: the [gpu][gemm]
// client tests and kiln-bench --check on the H200.)
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kernels/jit/op_generator.h"
#include "kiln/gemm/gemm_contract.h"
#include "server/jit/nvrtc_compiler.h"
#include "tests/kernels/compile_fixture.h"

namespace kiln::kernels {
namespace {

using namespace compile_test;

Params TacticParams(const std::string& dtype, const std::string& out, int tile_m, int tile_n, int stages,
                    int group_m = 8, int split_k = 1, int multicast = 1) {
  Params params = {{"dtype", dtype},
                   {"out_dtype", out},
                   {"tile_m", std::to_string(tile_m)},
                   {"tile_n", std::to_string(tile_n)},
                   {"stages", std::to_string(stages)},
                   {"group_m", std::to_string(group_m)},
                   {"split_k", std::to_string(split_k)}};
  if (multicast > 1) params["multicast"] = std::to_string(multicast);
  return params;
}

// `spec` compiles for sm_90a into its one grouped kernel, without spills or a stack.
void CompilesOneGroupedKernelWithoutSpills(const JitSpec& spec) {
  server::CompileRequest request{&spec, Tree().get(), *GpuArch::Parse("sm_90a"), {}, false, ""};
  auto result = Compiler().Compile(request);
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  REQUIRE(result->kernels.size() == 1);
  CHECK(result->kernels[0].name == "kiln_grouped_gemm");
  CHECK(result->kernels[0].spill_store_bytes == 0);
  CHECK(result->kernels[0].spill_load_bytes == 0);
  CHECK(result->kernels[0].stack_bytes == 0);
}

TEST_CASE("the gemm tactic space: what fits is generated, the rest refused with the limit", "[gemm][registry]") {
  int generated = 0, refused = 0;
  for (int tile_m : gemm::kTileMChoices) {
    for (int tile_n : gemm::kTileNChoices) {
      for (int split : gemm::kSplitKChoices) {
        for (int multicast : gemm::kMulticastChoices) {
          for (int stages = gemm::kMinStages; stages <= gemm::kMaxStages; ++stages) {
            const gemm::GemmTactic tactic{tile_m, tile_n, stages, 8, split, multicast};
            auto spec = OpRegistry::Builtin().Generate(
                "gemm", TacticParams("bf16", "bf16", tile_m, tile_n, stages, 8, split, multicast), *Tree());
            INFO(tile_m << "x" << tile_n << " stages " << stages << " split " << split << " multicast " << multicast
                        << ": " << spec.status().ToString());
            const int smem = gemm::GemmSmemBytes(tile_m, tile_n, stages, split, false, multicast);
            if (split > 1 && multicast > 1) {
              // A cluster splits K or shares B, not both.
              REQUIRE(!spec.ok());
              ++refused;
              CHECK(!gemm::GemmTacticFits(tactic));
              CHECK(std::string(spec.status().message())
                        .find("gemm: param 'multicast' = '2' is not allowed with split_k") != std::string::npos);
              continue;
            }
            if (gemm::GemmTacticFits(tactic)) {
              REQUIRE(spec.ok());
              ++generated;
              CHECK(smem <= gemm::kMaxSmemBytes);
              CHECK(spec->uri == "gemm_bf16_obf16_t" + std::to_string(tile_m) + "x" + std::to_string(tile_n) + "x64s" +
                                     std::to_string(stages) + "g8" + (split > 1 ? "k" + std::to_string(split) : "") +
                                     (multicast > 1 ? "m" + std::to_string(multicast) : ""));
              CHECK(spec->params.at("split_k") == std::to_string(split));
              CHECK(spec->params.at("multicast") == std::to_string(multicast));
              REQUIRE(spec->launch.size() == 1);
              CHECK(spec->launch[0].block == 128 * (tile_m / 64 + 1));
              CHECK(spec->launch[0].dynamic_smem == smem);
              CHECK(spec->launch[0].items_per_block == tile_m * tile_n);
            } else {
              REQUIRE(!spec.ok());
              ++refused;
              CHECK(smem > gemm::kMaxSmemBytes);
              CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
              const std::string message(spec.status().message());
              CHECK(message.find("gemm: param 'stages' = '" + std::to_string(stages) + "' is not allowed for tile " +
                                 std::to_string(tile_m) + "x" + std::to_string(tile_n)) != std::string::npos);
              CHECK(message.find("bytes of shared memory, over the 232448 a block may have; allowed here: 2..") !=
                    std::string::npos);
            }
          }
        }
      }
    }
  }
  CHECK(generated + refused == 2 * 4 * 4 * 2 * (gemm::kMaxStages - gemm::kMinStages + 1));
  CHECK(refused > 0);
  CHECK(gemm::GemmMaxStages(128, 256) == 4);
  CHECK(gemm::GemmMaxStages(128, 128) == 7);
  CHECK(gemm::GemmMaxStages(64, 64) == 8);
  // A split keeps the block's fp32 partial tile in shared memory too: fewer stages fit.
  CHECK(gemm::GemmMaxStages(64, 256, 8) == 4);
  CHECK(gemm::GemmMaxStages(64, 128, 4) == 8);
  CHECK(gemm::GemmMaxStages(128, 256, 2) == 2);
  CHECK(gemm::GemmMaxStages(128, 128, 2) == 5);
  // Multicast's one more barrier costs no stage.
  CHECK(gemm::GemmMaxStages(128, 256, 1, false, 2) == 4);
  CHECK(gemm::GemmMaxStages(128, 128, 1, false, 2) == 7);
  // fp8_gemm's too (not with a split), not the grouped ops'.
  CHECK(!gemm::GemmTacticFits({128, 256, 4, 8, 1, 2}, /*grouped=*/true));
  CHECK(gemm::Fp8GemmTacticFits({128, 256, 4, 8, 1, 2}));
  CHECK(!gemm::Fp8GemmTacticFits({128, 256, 2, 8, 2, 2}));
  CHECK(gemm::GemmClusterBlocks({128, 256, 4, 8, 1, 2}) == 2);
  CHECK(gemm::GemmClusterBlocks({64, 256, 4, 8, 4, 1}) == 4);
  // Work units: pairs of tile rows with multicast (an odd count rounds up), tiles without.
  CHECK(gemm::GemmClusterUnits(4096, 4096, {128, 256, 4, 8, 1, 2}) == 16 * 16);
  CHECK(gemm::GemmClusterUnits(300, 512, {128, 256, 4, 8, 1, 2}) == 2 * 2);
  CHECK(gemm::GemmClusterUnits(300, 512, {128, 256, 4, 8, 1, 1}) == 3 * 2);
  // split_k outside its list is refused by ParamInfo.
  auto bad_split = OpRegistry::Builtin().Generate("gemm", {{"dtype", "bf16"}, {"split_k", "3"}}, *Tree());
  REQUIRE(!bad_split.ok());
  CHECK(std::string(bad_split.status().message()).find("param 'split_k' = '3' is not allowed; allowed: 1, 2, 4, 8") !=
        std::string::npos);

  // Defaults: out_dtype = dtype, tile 128x128, the most stages, group_m 8.
  auto defaults = OpRegistry::Builtin().Generate("gemm", {{"dtype", "fp16"}}, *Tree());
  REQUIRE(defaults.ok());
  CHECK(defaults->uri == "gemm_fp16_ofp16_t128x128x64s7g8");
  // Params out of their lists are refused by ParamInfo, naming what is allowed.
  auto bad_tile = OpRegistry::Builtin().Generate("gemm", {{"dtype", "bf16"}, {"tile_n", "96"}}, *Tree());
  REQUIRE(!bad_tile.ok());
  CHECK(std::string(bad_tile.status().message())
            .find("param 'tile_n' = '96' is not allowed; allowed: 64, 128, 192, 256") != std::string::npos);
  auto fp32_in = OpRegistry::Builtin().Generate("gemm", {{"dtype", "fp32"}}, *Tree());
  REQUIRE(!fp32_in.ok());
  CHECK(std::string(fp32_in.status().message()).find("param 'dtype' = 'fp32' is not allowed") != std::string::npos);
}

TEST_CASE("gemm compiles only for sm_90a, and says so for any other target", "[gemm][compile]") {
  auto spec = OpRegistry::Builtin().Generate("gemm", {{"dtype", "bf16"}}, *Tree());
  REQUIRE(spec.ok());
  for (const char* other : {"sm_80", "sm_89", "sm_100a", "sm_120"}) {
    auto arch = ResolveArch(*GpuArch::Parse(other), spec->arch_families, spec->uri);
    INFO(other);
    REQUIRE(!arch.ok());
    CHECK(arch.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(arch.status().message()).find("sm_90a") != std::string::npos);
  }
  // An H200 reports sm_90: its code is the arch-specific sm_90a.
  for (const char* hopper_text : {"sm_90", "sm_90a"}) {
    auto hopper = ResolveArch(*GpuArch::Parse(hopper_text), spec->arch_families, spec->uri);
    REQUIRE(hopper.ok());
    CHECK(hopper->str() == "sm_90a");
  }
}

TEST_CASE("every gemm tile compiles for sm_90a at its most stages, without spills", "[gemm][compile]") {
  std::FILE* table = std::getenv("KILN_GEMM_COMPILE_TABLE") ? std::fopen(std::getenv("KILN_GEMM_COMPILE_TABLE"), "w")
                                                            : nullptr;
  int compiled = 0;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (int tile_m : gemm::kTileMChoices) {
      for (int tile_n : gemm::kTileNChoices) {
        // Both input types at every tile; the output types at one tile each (the epilogue); the
        // splits with bf16: every split of the 64-row tiles (the memory-bound ones), 2 of the others.
        // Multicast with bf16 at every 128-row tile (the compute-bound ones) and at 64 x 256.
        struct Variant {
          std::string out;
          int split = 1;
          int multicast = 1;
        };
        std::vector<Variant> variants = {{dtype}};
        if (tile_m == 128 && tile_n == 128) variants = {{"bf16"}, {"fp16"}, {"fp32"}};
        if (std::string(dtype) == "bf16") {
          for (int split : {2, 4, 8})
            if (tile_m == 64 || split == 2) variants.push_back({"bf16", split});
          if (tile_m == 128 || tile_n == 256) variants.push_back({"bf16", 1, 2});
        }
        for (const auto& [out, split, multicast] : variants) {
          const int stages = gemm::GemmMaxStages(tile_m, tile_n, split, false, multicast);
          auto spec = OpRegistry::Builtin().Generate(
              "gemm", TacticParams(dtype, out, tile_m, tile_n, stages, 8, split, multicast), *Tree());
          REQUIRE(spec.ok());
          server::CompileRequest request{&*spec, Tree().get(), *GpuArch::Parse("sm_90a"), {}, false, ""};
          auto result = Compiler().Compile(request);
          INFO(spec->uri << ": " << result.status().ToString());
          REQUIRE(result.ok());
          ++compiled;
          CHECK(result->cubin.starts_with("\x7f"
                                          "ELF"));
          REQUIRE(result->kernels.size() == 1);
          const server::KernelAttributes& k = result->kernels[0];
          CHECK(k.name == "kiln_gemm");
          CHECK(k.max_threads_per_block == spec->launch[0].block);
          CHECK(k.static_shared_bytes == 0);  // everything is in the hinted dynamic shared memory
          CHECK(k.registers > 0);
          // The accumulators (tile_n / 2 floats a thread) stay in registers.
          CHECK(k.spill_store_bytes == 0);
          CHECK(k.spill_load_bytes == 0);
          CHECK(k.stack_bytes == 0);
          if (table != nullptr) {
            std::fprintf(table, "%-40s block %3d smem %6d regs %3d spill %d/%d cubin %6zu B compile %7.1f ms\n",
                         spec->uri.c_str(), spec->launch[0].block, spec->launch[0].dynamic_smem, k.registers,
                         k.spill_store_bytes, k.spill_load_bytes, result->cubin.size(), result->compile_ms);
          }
        }
      }
    }
  }
  if (table != nullptr) std::fclose(table);
  CHECK(compiled == 2 * 8 + 2 * 2 + 4 * 3 + 4 + 5);
}

TEST_CASE("grouped_gemm and grouped fp8: both layouts generate and compile for sm_90a, with the group table in "
          "shared memory",
          "[gemm][compile]") {
  int compiled = 0;
  for (const char* op : {"grouped_gemm", "grouped_gemm_masked", "grouped_fp8_gemm", "grouped_fp8_gemm_masked"}) {
    const bool fp8 = std::string(op).find("fp8") != std::string::npos;
    for (int tile_m : gemm::kTileMChoices) {
      for (int tile_n : gemm::kTileNChoices) {
        const int stages = gemm::GemmMaxStages(tile_m, tile_n, 1, /*grouped=*/true);
        Params params = TacticParams("bf16", "bf16", tile_m, tile_n, stages);
        params.erase("split_k");         // gemm's alone
        if (fp8) params.erase("dtype");  // e4m3 is the op's
        auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
        INFO(op << " " << tile_m << "x" << tile_n << ": " << spec.status().ToString());
        REQUIRE(spec.ok());
        CHECK(spec->uri == std::string(op) + (fp8 ? "_e4m3_obf16_t" : "_bf16_obf16_t") + std::to_string(tile_m) + "x" +
                               std::to_string(tile_n) + (fp8 ? "x128s" : "x64s") + std::to_string(stages) + "g8");
        // The dense kernel's stages plus the group table, and the TMA-store epilogue's staging
        // buffers where they fit beside the stages (a consumer stores through them only rows
        // inside its tile's group).
        const bool staging = gemm::GemmHasStoreStaging(tile_m, tile_n, stages, 1, /*grouped=*/true, 1);
        CHECK(spec->launch[0].dynamic_smem ==
              gemm::GemmBaseSmemBytes(tile_m, tile_n, stages, 1, false, 1) + (gemm::kMaxGroups + 1) * 4 +
                  (staging ? gemm::GemmConsumers(tile_m) * gemm::kStoreStagingBytes : 0));
        // fused_moe's prefill tile has the buffers at its most stages (128 x 128 at 7 has not); the
        // grouped fp8 kernels do not store through them (their staged path spilled).
        if (tile_m == 128 && tile_n == 256) CHECK(staging);
        CHECK(gemm::GemmStagedStoresFit(tile_n, 2, /*grouped=*/true, fp8) == !fp8);
        CHECK(spec->launch[0].dynamic_smem == gemm::GemmSmemBytes(tile_m, tile_n, stages, 1, /*grouped=*/true));
        CHECK(spec->launch[0].dynamic_smem <= gemm::kMaxSmemBytes);
        // Every tile compiles at its most stages in one layout of each type; the other at two.
        const bool every = std::string(op) == (fp8 ? "grouped_fp8_gemm" : "grouped_gemm_masked");
        if (!every && !(tile_m == 128 && (tile_n == 128 || tile_n == 256))) continue;
        CompilesOneGroupedKernelWithoutSpills(*spec);
        ++compiled;
      }
    }
  }
  CHECK(compiled == 2 * (8 + 2));
  // The table of 256 groups costs no stage: the most stages are gemm's.
  for (int tile_m : gemm::kTileMChoices)
    for (int tile_n : gemm::kTileNChoices)
      CHECK(gemm::GemmMaxStages(tile_m, tile_n, 1, true) == gemm::GemmMaxStages(tile_m, tile_n));
  // grouped_gemm has no split_k, and refuses stages that do not fit, naming the bytes.
  auto split = OpRegistry::Builtin().Generate("grouped_gemm", {{"dtype", "bf16"}, {"split_k", "2"}}, *Tree());
  REQUIRE(!split.ok());
  CHECK(std::string(split.status().message()).find("split_k") != std::string::npos);
  auto too_deep = OpRegistry::Builtin().Generate(
      "grouped_gemm_masked", {{"dtype", "bf16"}, {"tile_m", "128"}, {"tile_n", "256"}, {"stages", "5"}}, *Tree());
  REQUIRE(!too_deep.ok());
  CHECK(std::string(too_deep.status().message())
            .find("grouped_gemm_masked: param 'stages' = '5' is not allowed for tile 128x256") != std::string::npos);
  // The grouped fp8 ops' inputs are e4m3 by the op: a dtype param is not one of their params.
  auto typed = OpRegistry::Builtin().Generate("grouped_fp8_gemm", {{"dtype", "bf16"}}, *Tree());
  REQUIRE(!typed.ok());
  CHECK(std::string(typed.status().message()).find("dtype") != std::string::npos);
}

TEST_CASE("grouped_gemm's silu_and_mul epilogue: every tile generates, the URI names it, both layouts compile "
          "for sm_90a without spills, and the fp8 ops take it only into e4m3",
          "[gemm][compile]") {
  int compiled = 0;
  for (const char* op : {"grouped_gemm", "grouped_gemm_masked"}) {
    for (int tile_m : gemm::kTileMChoices) {
      for (int tile_n : gemm::kTileNChoices) {
        const int stages = gemm::GemmMaxStages(tile_m, tile_n, 1, /*grouped=*/true);
        Params params = TacticParams("bf16", "bf16", tile_m, tile_n, stages);
        params.erase("split_k");
        params["epilogue"] = "silu_and_mul";
        auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
        INFO(op << " " << tile_m << "x" << tile_n << ": " << spec.status().ToString());
        REQUIRE(spec.ok());
        CHECK(spec->uri == std::string(op) + "_bf16_obf16_t" + std::to_string(tile_m) + "x" + std::to_string(tile_n) +
                               "x64s" + std::to_string(stages) + "g8_silu_and_mul");
        CHECK(spec->params.at("epilogue") == "silu_and_mul");
        // silu_and_mul's tile makes tile_n / 2 columns of D: staged only when they are whole
        // 64-column boxes of a 16-bit D (128 and 256 wide; 64 and 192 store from registers).
        CHECK(gemm::GemmStagedStoresFit(tile_n / 2, 2, true, false) == (tile_n == 128 || tile_n == 256));
        // The same shared memory as the plain kernel: the stage holds tile_n rows of B either way.
        CHECK(spec->launch[0].dynamic_smem == gemm::GemmSmemBytes(tile_m, tile_n, stages, 1, /*grouped=*/true));
        // The plain kernel's URI does not change, and its spec says epilogue none.
        params.erase("epilogue");
        auto plain = OpRegistry::Builtin().Generate(op, params, *Tree());
        REQUIRE(plain.ok());
        CHECK(plain->uri.find("silu") == std::string::npos);
        CHECK(plain->params.at("epilogue") == "none");
        // Every tile of the contiguous layout (fused_moe's), two of the masked one.
        if (std::string(op) == "grouped_gemm_masked" && !(tile_m == 128 && (tile_n == 128 || tile_n == 256))) continue;
        CompilesOneGroupedKernelWithoutSpills(*spec);
        ++compiled;
      }
    }
  }
  CHECK(compiled == 8 + 2);
  auto bad = OpRegistry::Builtin().Generate("grouped_gemm", {{"dtype", "bf16"}, {"epilogue", "gelu"}}, *Tree());
  REQUIRE(!bad.ok());
  CHECK(std::string(bad.status().message()).find("epilogue") != std::string::npos);
  auto fp8 = OpRegistry::Builtin().Generate("grouped_fp8_gemm", {{"epilogue", "silu_and_mul"}}, *Tree());
  REQUIRE(!fp8.ok());
  CHECK(std::string(fp8.status().message()) ==
        "grouped_fp8_gemm: param 'out_dtype' = 'bf16' is not allowed with epilogue silu_and_mul: on fp8 inputs it "
        "writes e4m3 codes and scales (out_dtype fp8_e4m3)");
}

TEST_CASE("grouped_fp8_gemm's silu_and_mul epilogue into e4m3: both 256-wide tiles generate and compile for sm_90a "
          "without spills, and other tiles, outputs and layouts are refused with the reason",
          "[gemm][compile]") {
  for (int tile_m : gemm::kTileMChoices) {
    const int stages = gemm::GemmMaxStages(tile_m, 256, 1, /*grouped=*/true);
    Params params = TacticParams("bf16", "fp8_e4m3", tile_m, 256, stages);
    params.erase("split_k");
    params.erase("dtype");
    params["epilogue"] = "silu_and_mul";
    auto spec = OpRegistry::Builtin().Generate("grouped_fp8_gemm", params, *Tree());
    INFO(tile_m << "x256: " << spec.status().ToString());
    REQUIRE(spec.ok());
    CHECK(spec->uri == "grouped_fp8_gemm_e4m3_ofp8_e4m3_t" + std::to_string(tile_m) + "x256x128s" +
                           std::to_string(stages) + "g8_silu_and_mul");
    CHECK(spec->params.at("out_dtype") == "fp8_e4m3");
    CHECK(spec->launch[0].dynamic_smem == gemm::GemmSmemBytes(tile_m, 256, stages, 1, /*grouped=*/true));
    CompilesOneGroupedKernelWithoutSpills(*spec);
  }
  const auto refusal = [](const char* op, Params params) {
    auto spec = OpRegistry::Builtin().Generate(op, params, *Tree());
    REQUIRE(!spec.ok());
    return std::string(spec.status().message());
  };
  CHECK(refusal("grouped_fp8_gemm", {{"out_dtype", "fp8_e4m3"}, {"epilogue", "silu_and_mul"}, {"tile_n", "128"}}) ==
        "grouped_fp8_gemm: param 'tile_n' = '128' is not allowed with epilogue silu_and_mul: a tile's 128 columns of "
        "D are one scale group (tile_n 256)");
  CHECK(refusal("grouped_fp8_gemm", {{"out_dtype", "fp8_e4m3"}, {"tile_n", "256"}}) ==
        "grouped_fp8_gemm: param 'out_dtype' = 'fp8_e4m3' is the silu_and_mul epilogue's output (codes and a scale "
        "per row and 128 columns); set epilogue=silu_and_mul");
  // The masked op has neither (fused_moe_fp8's gate-and-up GEMM is contiguous).
  CHECK(refusal("grouped_fp8_gemm_masked", {{"out_dtype", "fp8_e4m3"}, {"tile_n", "256"}}).find("out_dtype") !=
        std::string::npos);
  CHECK(refusal("grouped_fp8_gemm_masked", {{"epilogue", "silu_and_mul"}}).find("epilogue") != std::string::npos);
  // Neither the 16-bit ops nor fp8_gemm write e4m3.
  CHECK(refusal("grouped_gemm", {{"dtype", "bf16"}, {"out_dtype", "fp8_e4m3"}, {"epilogue", "silu_and_mul"}})
            .find("out_dtype") != std::string::npos);
  CHECK(refusal("fp8_gemm", {{"out_dtype", "fp8_e4m3"}}).find("out_dtype") != std::string::npos);
}

TEST_CASE("the contiguous grouped ops' gathered A (a_gather 1): the URI and params name it, every fp8 tile and "
          "the 16-bit and silu_and_mul prefill tiles compile for sm_90a without spills, the masked ops refuse it",
          "[gemm][compile]") {
  int compiled = 0;
  struct Variant {
    const char* op;
    const char* out;
    bool silu_and_mul;
  };
  for (const Variant& v : {Variant{"grouped_fp8_gemm", "bf16", false}, Variant{"grouped_gemm", "bf16", false},
                           Variant{"grouped_gemm", "bf16", true}, Variant{"grouped_fp8_gemm", "fp8_e4m3", true}}) {
    const bool fp8 = std::string(v.op).find("fp8") != std::string::npos;
    for (int tile_m : gemm::kTileMChoices) {
      for (int tile_n : gemm::kTileNChoices) {
        // Every tile of grouped_fp8_gemm (fused_moe_fp8's gate-and-up GEMM where I is not a
        // multiple of 128); the others at their prefill tiles.
        const bool every = fp8 && !v.silu_and_mul;
        if (!every && !(tile_n == 256 && (tile_m == 128 || !v.silu_and_mul)) && !(tile_m == 128 && tile_n == 128))
          continue;
        if (fp8 && v.silu_and_mul && tile_n != 256) continue;
        const int stages = gemm::GemmMaxStages(tile_m, tile_n, 1, /*grouped=*/true);
        Params params = TacticParams("bf16", v.out, tile_m, tile_n, stages);
        params.erase("split_k");
        if (fp8) params.erase("dtype");
        if (v.silu_and_mul) params["epilogue"] = "silu_and_mul";
        params["a_gather"] = "1";
        auto spec = OpRegistry::Builtin().Generate(v.op, params, *Tree());
        INFO(v.op << " " << v.out << " " << tile_m << "x" << tile_n << (v.silu_and_mul ? " silu_and_mul" : "") << ": "
                  << spec.status().ToString());
        REQUIRE(spec.ok());
        CHECK(spec->uri.size() > 3);
        CHECK(spec->uri.substr(spec->uri.size() - 3) == "_ga");
        CHECK(spec->params.at("a_gather") == "1");
        // The same shared memory as the kernel that loads A with TMA.
        CHECK(spec->launch[0].dynamic_smem == gemm::GemmSmemBytes(tile_m, tile_n, stages, 1, /*grouped=*/true));
        // Without it, the URI is as before and the spec says 0.
        params.erase("a_gather");
        auto in_place = OpRegistry::Builtin().Generate(v.op, params, *Tree());
        REQUIRE(in_place.ok());
        CHECK(in_place->uri + "_ga" == spec->uri);
        CHECK(in_place->params.at("a_gather") == "0");
        CompilesOneGroupedKernelWithoutSpills(*spec);
        ++compiled;
      }
    }
  }
  CHECK(compiled == 8 + 3 + 2 + 1);
  for (const char* masked : {"grouped_gemm_masked", "grouped_fp8_gemm_masked"}) {
    Params params = {{"a_gather", "1"}};
    if (std::string(masked) == "grouped_gemm_masked") params["dtype"] = "bf16";
    auto spec = OpRegistry::Builtin().Generate(masked, params, *Tree());
    INFO(masked);
    REQUIRE(!spec.ok());
    CHECK(std::string(spec.status().message()).find("a_gather") != std::string::npos);
  }
}

TEST_CASE("fp8_gemm compiles every tile and the decode splits for sm_90a without spills", "[gemm][compile]") {
  int compiled = 0;
  for (const char* out : {"bf16", "fp32"}) {
    for (int tile_m : gemm::kTileMChoices) {
      for (int tile_n : gemm::kTileNChoices) {
        if (std::string(out) == "fp32" && !(tile_m == 128 && tile_n == 256)) continue;
        // Every split of the 64-row tiles with bf16 out (the memory-bound ones), 2 of the others;
        // the 128-row tiles as multicast pairs (bf16 out): split 0 below stands for multicast 2.
        std::vector<int> splits = {1};
        if (std::string(out) == "bf16") {
          for (int split : {2, 4, 8})
            if (tile_m == 64 || split == 2) splits.push_back(split);
          if (tile_m == 128) splits.push_back(0);
        }
        for (int split_or_pair : splits) {
          const int split = split_or_pair == 0 ? 1 : split_or_pair;
          const int multicast = split_or_pair == 0 ? 2 : 1;
          const int stages = gemm::GemmMaxStages(tile_m, tile_n, split, false, multicast);
          Params params = TacticParams("bf16", out, tile_m, tile_n, stages, 8, split, multicast);
          params.erase("dtype");
          auto spec = OpRegistry::Builtin().Generate("fp8_gemm", params, *Tree());
          INFO(tile_m << "x" << tile_n << " split " << split << " multicast " << multicast << " " << out << ": "
                      << spec.status().ToString());
          REQUIRE(spec.ok());
          CHECK(spec->uri == "fp8_gemm_e4m3_o" + std::string(out) + "_t" + std::to_string(tile_m) + "x" +
                                 std::to_string(tile_n) + "x128s" + std::to_string(stages) + "g8" +
                                 (split > 1 ? "k" + std::to_string(split) : "") + (multicast > 1 ? "m2" : ""));
          CHECK(spec->params.at("multicast") == std::to_string(multicast));
          server::CompileRequest request{&*spec, Tree().get(), *GpuArch::Parse("sm_90a"), {}, false, ""};
          auto result = Compiler().Compile(request);
          INFO(result.status().ToString());
          REQUIRE(result.ok());
          ++compiled;
          REQUIRE(result->kernels.size() == 1);
          CHECK(result->kernels[0].name == "kiln_fp8_gemm");
          // Two accumulator sets (a block's product, 128 columns at most, and the promoted sums of
          // up to 256 columns) stay in registers.
          CHECK(result->kernels[0].spill_store_bytes == 0);
          CHECK(result->kernels[0].spill_load_bytes == 0);
          CHECK(result->kernels[0].stack_bytes == 0);
        }
      }
    }
  }
  CHECK(compiled == 8 + 1 + 4 * 3 + 4 + 4);
}

TEST_CASE("the generated wgmma header is in step with kernels/tools/gen_wgmma.py", "[gemm][registry]") {
  const std::string command = "python3 " KILN_TEST_SOURCE_DIR "/kernels/tools/gen_wgmma.py --check";
  const int rc = std::system(command.c_str());
  INFO(command << " failed: the header is stale; run python3 kernels/tools/gen_wgmma.py");
  CHECK(rc == 0);
}

}  // namespace
}  // namespace kiln::kernels
