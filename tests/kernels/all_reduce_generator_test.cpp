#include "kernels/ops/comm/all_reduce_generator.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/comm/comm_contract.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

using namespace generator_test;

TEST_CASE("the builtin registry serves all_reduce and all_reduce_add_rmsnorm", "[comm]") {
  const OpRegistry& registry = OpRegistry::Builtin();
  const OpGenerator* all_reduce = registry.Find("all_reduce");
  const OpGenerator* fused = registry.Find("all_reduce_add_rmsnorm");
  REQUIRE(all_reduce != nullptr);
  REQUIRE(fused != nullptr);
  auto names = [](const OpGenerator* op) {
    std::set<std::string> names;
    for (const ParamInfo& param : op->params()) names.insert(param.name);
    return names;
  };
  CHECK(names(all_reduce) == std::set<std::string>{"dtype", "world_size", "vec"});
  CHECK(names(fused) == std::set<std::string>{"dtype", "world_size", "hidden", "vec"});
  for (const OpGenerator* op : {all_reduce, fused}) {
    CHECK(!op->description().empty());
    for (const ParamInfo& param : op->params()) {
      CHECK(!param.help.empty());
      CHECK(param.default_value == (param.name == "vec" ? "auto" : ""));
    }
  }
  auto unknown = registry.Generate("all_gather", {}, Tree());
  REQUIRE(!unknown.ok());
  CHECK(unknown.status().code() == absl::StatusCode::kNotFound);
  // The known ops, sorted; other families' ops sit among them.
  CHECK(Contains(unknown.status().message(), "all_reduce, all_reduce_add_rmsnorm, "));
  CHECK(Contains(unknown.status().message(), ", rmsnorm"));
}

TEST_CASE("all_reduce URIs are readable and canonical", "[comm]") {
  CHECK(MustGenerate("all_reduce", {{"dtype", "bf16"}, {"world_size", "8"}}).uri == "all_reduce_bf16_w8");
  CHECK(MustGenerate("all_reduce", {{"dtype", "fp32"}, {"world_size", "2"}}).uri == "all_reduce_fp32_w2");
  CHECK(MustGenerate("all_reduce", {{"dtype", "fp16"}, {"world_size", "4"}, {"vec", "2"}}).uri ==
        "all_reduce_fp16_w4_v2");
  CHECK(MustGenerate("all_reduce", {{"dtype", "fp32"}, {"world_size", "4"}, {"vec", "1"}}).uri ==
        "all_reduce_fp32_w4_v1");
  CHECK(MustGenerate("all_reduce_add_rmsnorm", {{"dtype", "bf16"}, {"world_size", "8"}, {"hidden", "4096"}}).uri ==
        "all_reduce_add_rmsnorm_bf16_w8_h4096");
  CHECK(
      MustGenerate("all_reduce_add_rmsnorm", {{"dtype", "bf16"}, {"world_size", "8"}, {"hidden", "4096"}, {"vec", "4"}})
          .uri == "all_reduce_add_rmsnorm_bf16_w8_h4096_v4");
  CHECK(MustGenerate("all_reduce_add_rmsnorm", {{"dtype", "fp16"}, {"world_size", "2"}, {"hidden", "4095"}}).uri ==
        "all_reduce_add_rmsnorm_fp16_w2_h4095");

  // Equal spellings are one specialization: same URI, params, config and hints.
  const JitSpec omitted = MustGenerate("all_reduce", {{"dtype", "bf16"}, {"world_size", "8"}});
  for (const Params& params : {Params{{"dtype", "bf16"}, {"world_size", "8"}, {"vec", "8"}},
                               Params{{"dtype", "bf16"}, {"world_size", "8"}, {"vec", "auto"}},
                               Params{{"dtype", "bf16"}, {"world_size", "08"}}}) {
    const JitSpec given = MustGenerate("all_reduce", params);
    CHECK(given.uri == omitted.uri);
    CHECK(given.params == omitted.params);
    CHECK(given.headers[0].content == omitted.headers[0].content);
    CHECK(given.launch == omitted.launch);
  }
  CHECK(omitted.params == Params{{"dtype", "bf16"}, {"world_size", "8"}, {"vec", "8"}});
  CHECK(MustGenerate("all_reduce", {{"dtype", "fp32"}, {"world_size", "2"}}).params.at("vec") == "4");

  const JitSpec fused = MustGenerate("all_reduce_add_rmsnorm",
                                     {{"dtype", "bf16"}, {"world_size", "4"}, {"hidden", "4096"}});
  for (const Params& params : {Params{{"dtype", "bf16"}, {"world_size", "4"}, {"hidden", "04096"}, {"vec", "8"}},
                               Params{{"dtype", "bf16"}, {"world_size", "04"}, {"hidden", "4096"}, {"vec", "auto"}}}) {
    const JitSpec given = MustGenerate("all_reduce_add_rmsnorm", params);
    CHECK(given.uri == fused.uri);
    CHECK(given.params == fused.params);
    CHECK(given.headers[0].content == fused.headers[0].content);
  }
  CHECK(fused.params == Params{{"dtype", "bf16"}, {"world_size", "4"}, {"hidden", "4096"}, {"vec", "8"}});
  // hidden 4094 (bf16): the default vec is the largest dividing it.
  CHECK(MustGenerate("all_reduce_add_rmsnorm", {{"dtype", "bf16"}, {"world_size", "4"}, {"hidden", "4094"}})
            .params.at("vec") == "2");

  // Distinct specializations, distinct URIs; all safe path components.
  std::set<std::string> uris;
  size_t specs = 0;
  for (const char* dtype : {"fp32", "fp16", "bf16"}) {
    for (int world = 2; world <= 8; ++world) {
      for (const char* vec : {"1", "2", "4", "8"}) {
        auto spec = Generate("all_reduce", {{"dtype", dtype}, {"world_size", std::to_string(world)}, {"vec", vec}});
        if (spec.ok()) {
          ++specs;
          uris.insert(spec->uri);
        }
        for (int hidden : {1, 2, 3, 8, 4095, 4096, 16384}) {
          auto f = Generate("all_reduce_add_rmsnorm", {{"dtype", dtype},
                                                       {"world_size", std::to_string(world)},
                                                       {"hidden", std::to_string(hidden)},
                                                       {"vec", vec}});
          if (!f.ok()) continue;
          ++specs;
          uris.insert(f->uri);
        }
      }
    }
  }
  CHECK(uris.size() == specs);
  for (const std::string& uri : uris) {
    INFO(uri);
    CHECK(uri.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos);
  }
}

TEST_CASE("an all_reduce spec names its unit, both entries, family and launch hints", "[comm]") {
  const JitSpec spec = MustGenerate("all_reduce", {{"dtype", "bf16"}, {"world_size", "8"}});
  CHECK(spec.op == "all_reduce");
  REQUIRE(spec.headers.size() == 1);
  CHECK(spec.headers[0].name == "kiln_config.cuh");
  CHECK(spec.headers[0].origin == SourceFile::Origin::kGenerated);
  const std::string& config = spec.headers[0].content;
  CHECK(Contains(config, "#define KILN_ALL_REDUCE_T __nv_bfloat16\n"));
  CHECK(Contains(config, "#define KILN_ALL_REDUCE_WORLD 8\n"));
  CHECK(Contains(config, "#define KILN_ALL_REDUCE_VEC 8\n"));
  CHECK(Contains(config, "#define KILN_ALL_REDUCE_BLOCK 512\n"));
  REQUIRE(spec.units.size() == 1);
  CHECK(spec.units[0].name == "all_reduce.cu");
  CHECK(spec.units[0].origin == SourceFile::Origin::kKernels);
  CHECK(spec.units[0].tree_path == "src/comm/all_reduce.cu");
  CHECK(spec.units[0].content == *Tree().Read("src/comm/all_reduce.cu"));
  CHECK(!spec.link);
  CHECK(spec.entries == std::vector<std::string>{"kiln_all_reduce_one_shot", "kiln_all_reduce_two_shot"});
  REQUIRE(spec.arch_families.size() == 1);
  CHECK(spec.arch_families[0].name == "sm_80+");
  CHECK(spec.nvrtc_options == std::vector<std::string>{"-std=c++17"});
  CHECK(spec.launch == std::vector<EntryLaunch>{{.entry = "kiln_all_reduce_one_shot", .block = 512, .max_blocks = 64},
                                                {.entry = "kiln_all_reduce_two_shot", .block = 512, .max_blocks = 64}});
  CHECK(spec.params.at("vec") == "8");
  CHECK(spec.compile_memory_mb > 0);
  CHECK(MustGenerate("all_reduce", {{"dtype", "fp32"}, {"world_size", "3"}, {"vec", "1"}}).params.at("vec") == "1");

  const JitSpec fused = MustGenerate("all_reduce_add_rmsnorm",
                                     {{"dtype", "fp16"}, {"world_size", "2"}, {"hidden", "8192"}});
  CHECK(fused.op == "all_reduce_add_rmsnorm");
  CHECK(fused.entries == std::vector<std::string>{"kiln_all_reduce_add_rmsnorm"});
  REQUIRE(fused.units.size() == 1);
  CHECK(fused.units[0].tree_path == "src/comm/all_reduce_add_rmsnorm.cu");
  CHECK(fused.units[0].name == "all_reduce_add_rmsnorm.cu");
  const std::string& fused_config = fused.headers[0].content;
  CHECK(Contains(fused_config, "#define KILN_AR_RMSNORM_T __half\n"));
  CHECK(Contains(fused_config, "#define KILN_AR_RMSNORM_WORLD 2\n"));
  CHECK(Contains(fused_config, "#define KILN_AR_RMSNORM_HIDDEN 8192\n"));
  CHECK(Contains(fused_config, "#define KILN_AR_RMSNORM_VEC 8\n"));
  CHECK(Contains(fused_config, "#define KILN_AR_RMSNORM_BLOCK 256\n"));  // 1024 vectors, 4 per thread
  CHECK(fused.launch ==
        std::vector<EntryLaunch>{{.entry = "kiln_all_reduce_add_rmsnorm", .block = 256, .max_blocks = 128}});
  CHECK(fused.arch_families[0].name == "sm_80+");
}

TEST_CASE("all_reduce launch rules: grid, blocks, vec", "[comm]") {
  // One-shot: one thread per vector of n; two-shot: per vector of this rank's chunk.
  CHECK(comm::AllReduceGrid(0, 8, 8, false, 512, 64) == 1);
  CHECK(comm::AllReduceGrid(7, 8, 8, false, 512, 64) == 1);  // only a tail
  CHECK(comm::AllReduceGrid(4096, 8, 8, false, 512, 64) == 1);
  CHECK(comm::AllReduceGrid(4096 * 8 + 1, 8, 8, false, 512, 64) == 8);
  CHECK(comm::AllReduceGrid(4096 * 8 + 8, 8, 8, false, 512, 64) == 9);
  CHECK(comm::AllReduceGrid(1LL << 30, 8, 8, false, 512, 64) == 64);
  CHECK(comm::AllReduceGrid(4096 * 8, 8, 8, true, 512, 64) == 1);
  CHECK(comm::AllReduceGrid(4096 * 8 * 8, 8, 8, true, 512, 64) == 8);
  CHECK(comm::AllReduceGrid(4096 * 8 * 8 + 8, 8, 8, true, 512, 64) == 9);  // per = 4097 vectors
  CHECK(comm::AllReduceGrid(1LL << 30, 4, 2, true, 512, 64) == 64);
  CHECK(comm::AllReduceAddRmsNormGrid(0, 128) == 1);
  CHECK(comm::AllReduceAddRmsNormGrid(100, 128) == 100);
  CHECK(comm::AllReduceAddRmsNormGrid(1000, 128) == 128);

  // The default vec: 16 bytes, dividing hidden for add_rmsnorm.
  CHECK(MustGenerate("all_reduce", {{"dtype", "bf16"}, {"world_size", "2"}}).params.at("vec") == "8");
  CHECK(MustGenerate("all_reduce", {{"dtype", "fp32"}, {"world_size", "2"}}).params.at("vec") == "4");
  CHECK(MustGenerate("all_reduce_add_rmsnorm", {{"dtype", "bf16"}, {"world_size", "2"}, {"hidden", "4096"}})
            .params.at("vec") == "8");
  CHECK(MustGenerate("all_reduce_add_rmsnorm", {{"dtype", "bf16"}, {"world_size", "2"}, {"hidden", "4095"}})
            .params.at("vec") == "1");
  CHECK(MustGenerate("all_reduce_add_rmsnorm", {{"dtype", "fp32"}, {"world_size", "2"}, {"hidden", "4094"}})
            .params.at("vec") == "2");

  for (int hidden = 1; hidden <= comm::kMaxAddRmsNormHidden; hidden += (hidden < 300 ? 1 : 97)) {
    for (int vec : {1, 2, 4, 8}) {
      if (hidden % vec != 0) continue;
      const int block = AllReduceAddRmsNormBlock(hidden, vec);
      INFO("hidden " << hidden << " vec " << vec << " block " << block);
      CHECK(block % 32 == 0);
      CHECK(block >= 32);
      CHECK(block <= 512);
      // A thread holds at most 32 vectors of the row (registers), 4 where the block allows.
      const int items = (hidden / vec + block - 1) / block;
      CHECK(items <= 32);
      if (block < 512) CHECK(items <= 4);
      const int max_blocks = AllReduceAddRmsNormMaxBlocks(block);
      CHECK(max_blocks >= 64);
      CHECK(max_blocks <= comm::kMaxBlocks);
    }
  }
  CHECK(AllReduceAddRmsNormBlock(16384, 1) == 512);
  CHECK(AllReduceAddRmsNormBlock(4096, 8) == 128);
  CHECK(AllReduceAddRmsNormBlock(1, 1) == 32);
  CHECK(AllReduceAddRmsNormMaxBlocks(512) == 64);
  CHECK(AllReduceAddRmsNormMaxBlocks(128) == 256);
}

TEST_CASE("every bad, unknown or missing comm param is INVALID_ARGUMENT naming it", "[comm]") {
  struct Case {
    Params params;
    std::vector<std::string> parts;  // the message names these
  };
  // Shared by both ops (add_rmsnorm gets a valid hidden added where the case has none).
  const std::vector<Case> common = {
      {{{"world_size", "8"}}, {"'dtype'", "required", "fp32, fp16, bf16"}},
      {{{"dtype", "fp64"}, {"world_size", "8"}}, {"'dtype'", "'fp64'", "allowed: fp32, fp16, bf16"}},
      {{{"dtype", "BF16"}, {"world_size", "8"}}, {"'dtype'", "'BF16'"}},
      {{{"dtype", "bf16"}}, {"'world_size'", "required", "2..8"}},
      {{{"dtype", "bf16"}, {"world_size", "1"}}, {"'world_size'", "'1'", "2..8"}},
      {{{"dtype", "bf16"}, {"world_size", "9"}}, {"'world_size'", "'9'", "2..8"}},
      {{{"dtype", "bf16"}, {"world_size", "0"}}, {"'world_size'", "'0'"}},
      {{{"dtype", "bf16"}, {"world_size", "-2"}}, {"'world_size'", "'-2'"}},
      {{{"dtype", "bf16"}, {"world_size", "+2"}}, {"'world_size'", "'+2'"}},
      {{{"dtype", "bf16"}, {"world_size", "two"}}, {"'world_size'", "'two'"}},
      {{{"dtype", "bf16"}, {"world_size", ""}}, {"'world_size'", "''"}},
      {{{"dtype", "bf16"}, {"world_size", "8 "}}, {"'world_size'", "'8 '"}},
      {{{"dtype", "bf16"}, {"world_size", "99999999999"}}, {"'world_size'"}},
      {{{"dtype", "bf16"}, {"world_size", "8"}, {"vec", "3"}}, {"'vec'", "'3'", "a power of two in 1..16"}},
      {{{"dtype", "bf16"}, {"world_size", "8"}, {"vec", "0"}}, {"'vec'", "'0'"}},
      {{{"dtype", "bf16"}, {"world_size", "8"}, {"vec", "16"}}, {"'vec'", "'16'", "2 bytes <= 16"}},
      {{{"dtype", "fp32"}, {"world_size", "8"}, {"vec", "8"}}, {"'vec'", "'8'", "allowed here: 1, 2, 4"}},
      {{{"dtype", "fp16"}, {"world_size", "8"}, {"vec", "x"}}, {"'vec'", "'x'"}},
      {{{"dtype", "bf16"}, {"world_size", "8"}, {"eps", "1e-6"}},
       {"unknown param 'eps'", "dtype", "world_size", "vec"}},
      {{{"dtype", "bf16"}, {"world_size", "8"}, {"", "x"}}, {"unknown param ''"}},
      {{{"dtype", "bf16"}, {"world_size", "8"}, {"rank", "0"}}, {"unknown param 'rank'"}},
  };
  for (const char* op : {"all_reduce", "all_reduce_add_rmsnorm"}) {
    const bool fused = std::string(op) == "all_reduce_add_rmsnorm";
    std::vector<Case> cases = common;
    if (fused) {
      for (Case& c : cases) c.params.emplace("hidden", "4096");
      const std::vector<Case> hidden_cases = {
          {{{"dtype", "bf16"}, {"world_size", "8"}}, {"'hidden'", "required", "1..16384"}},
          {{{"dtype", "bf16"}, {"world_size", "8"}, {"hidden", "0"}}, {"'hidden'", "'0'", "1..16384"}},
          {{{"dtype", "bf16"}, {"world_size", "8"}, {"hidden", "16385"}}, {"'hidden'", "'16385'", "1..16384"}},
          {{{"dtype", "bf16"}, {"world_size", "8"}, {"hidden", "-1"}}, {"'hidden'", "'-1'"}},
          {{{"dtype", "bf16"}, {"world_size", "8"}, {"hidden", "4k"}}, {"'hidden'", "'4k'"}},
          {{{"dtype", "bf16"}, {"world_size", "8"}, {"hidden", ""}}, {"'hidden'", "''"}},
          {{{"dtype", "fp16"}, {"world_size", "8"}, {"hidden", "4094"}, {"vec", "4"}},
           {"'vec'", "'4'", "divides hidden", "allowed here: 1, 2"}},
          {{{"dtype", "fp16"}, {"world_size", "8"}, {"hidden", "4095"}, {"vec", "2"}}, {"'vec'", "allowed here: 1"}},
      };
      cases.insert(cases.end(), hidden_cases.begin(), hidden_cases.end());
    } else {
      cases.push_back({{{"dtype", "bf16"}, {"world_size", "8"}, {"hidden", "4096"}}, {"unknown param 'hidden'"}});
    }
    for (const Case& c : cases) {
      auto spec = Generate(op, c.params);
      REQUIRE(!spec.ok());
      const std::string message(spec.status().message());
      INFO(op << ": " << message);
      CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK(message.starts_with(std::string(op) + ": "));
      for (const std::string& part : c.parts) CHECK(Contains(message, part));
    }
  }
}

TEST_CASE("a kernels tree without a comm unit is FAILED_PRECONDITION", "[comm]") {
  TreeSnapshot empty;
  empty.root = "/nowhere/kernels";
  auto spec = OpRegistry::Builtin().Generate("all_reduce", {{"dtype", "bf16"}, {"world_size", "8"}}, empty);
  REQUIRE(!spec.ok());
  CHECK(spec.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(spec.status().message(), "src/comm/all_reduce.cu"));
  CHECK(Contains(spec.status().message(), "/nowhere/kernels"));
  auto fused = OpRegistry::Builtin().Generate("all_reduce_add_rmsnorm",
                                              {{"dtype", "bf16"}, {"world_size", "8"}, {"hidden", "64"}}, empty);
  REQUIRE(!fused.ok());
  CHECK(fused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(fused.status().message(), "src/comm/all_reduce_add_rmsnorm.cu"));
}

}  // namespace
}  // namespace kiln::kernels
