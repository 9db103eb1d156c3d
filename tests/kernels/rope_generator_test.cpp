// The rope family's generators (apply_rope, apply_rope_with_cos_sin_cache): registry, readable
// and canonical URIs, the spec's sources, entry, family and launch hints, the launch-shape
// rule, and every bad, unknown or missing param refused with a message naming it.
#include "kernels/ops/rope/rope_generator.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/rope/rope_contract.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

using namespace generator_test;

constexpr const char* kOps[] = {"apply_rope", "apply_rope_with_cos_sin_cache"};

TEST_CASE("the builtin registry serves apply_rope and apply_rope_with_cos_sin_cache", "[rope]") {
  for (const char* op : kOps) {
    const OpGenerator* g = OpRegistry::Builtin().Find(op);
    REQUIRE(g != nullptr);
    CHECK(!g->description().empty());
    std::set<std::string> names;
    for (const ParamInfo& p : g->params()) names.insert(p.name);
    CHECK(names == std::set<std::string>{"dtype", "rotary_dim", "style", "pos_dtype", "vec"});
  }
}

TEST_CASE("rope URIs are readable and canonical", "[rope]") {
  CHECK(MustGenerate("apply_rope", {{"dtype", "bf16"}, {"rotary_dim", "128"}}).uri == "apply_rope_bf16_r128_neox_i64");
  CHECK(MustGenerate("apply_rope", {{"dtype", "fp16"}, {"rotary_dim", "64"}, {"style", "gptj"}, {"pos_dtype", "int32"}})
            .uri == "apply_rope_fp16_r64_gptj_i32");
  CHECK(MustGenerate("apply_rope_with_cos_sin_cache", {{"dtype", "bf16"}, {"rotary_dim", "128"}, {"vec", "2"}}).uri ==
        "apply_rope_with_cos_sin_cache_bf16_r128_neox_i64_v2");

  // Defaults given or omitted are the same specialization: same URI, same spec.
  const JitSpec omitted = MustGenerate("apply_rope", {{"dtype", "bf16"}, {"rotary_dim", "128"}});
  for (const Params& params : {Params{{"dtype", "bf16"}, {"rotary_dim", "128"}, {"vec", "8"}},
                               Params{{"dtype", "bf16"}, {"rotary_dim", "128"}, {"vec", "auto"}, {"style", "neox"}},
                               Params{{"dtype", "bf16"}, {"rotary_dim", "0128"}, {"pos_dtype", "int64"}}}) {
    const JitSpec given = MustGenerate("apply_rope", params);
    CHECK(given.uri == omitted.uri);
    CHECK(given.params == omitted.params);
    CHECK(given.headers[0].content == omitted.headers[0].content);
    CHECK(given.launch == omitted.launch);
  }
  CHECK(omitted.params ==
        Params{{"dtype", "bf16"}, {"rotary_dim", "128"}, {"style", "neox"}, {"pos_dtype", "int64"}, {"vec", "8"}});

  std::set<std::string> uris;
  size_t specs = 0;
  for (const char* op : kOps)
    for (const char* dtype : {"fp16", "bf16"})
      for (int rotary : {2, 32, 64, 96, 100, 128, 256, 512})
        for (const char* style : {"neox", "gptj"})
          for (const char* pos : {"int32", "int64"})
            for (const char* vec : {"1", "2", "4", "8"}) {
              auto spec = Generate(op, {{"dtype", dtype},
                                        {"rotary_dim", std::to_string(rotary)},
                                        {"style", style},
                                        {"pos_dtype", pos},
                                        {"vec", vec}});
              if (!spec.ok()) continue;
              ++specs;
              uris.insert(spec->uri);
            }
  CHECK(specs > 200);
  CHECK(uris.size() == specs);
}

TEST_CASE("a rope spec names its sources, entry, family and launch shape", "[rope]") {
  const JitSpec spec = MustGenerate("apply_rope", {{"dtype", "bf16"}, {"rotary_dim", "128"}, {"style", "gptj"}});
  CHECK(spec.op == "apply_rope");
  REQUIRE(spec.headers.size() == 1);
  CHECK(spec.headers[0].name == "kiln_config.cuh");
  CHECK(spec.headers[0].origin == SourceFile::Origin::kGenerated);
  const std::string& config = spec.headers[0].content;
  CHECK(Contains(config, "#define KILN_ROPE_COS_SIN_CACHE 0\n"));
  CHECK(Contains(config, "#define KILN_ROPE_T __nv_bfloat16\n"));
  CHECK(Contains(config, "#define KILN_ROPE_POS long long\n"));
  CHECK(Contains(config, "#define KILN_ROPE_ROTARY_DIM 128\n"));
  CHECK(Contains(config, "#define KILN_ROPE_VEC 8\n"));
  CHECK(Contains(config, "#define KILN_ROPE_INTERLEAVED 1\n"));
  CHECK(Contains(config, "#define KILN_ROPE_TOKENS_PER_BLOCK 16\n"));
  REQUIRE(spec.units.size() == 1);
  CHECK(spec.units[0].name == "rope.cu");
  CHECK(spec.units[0].tree_path == "src/rope/rope.cu");
  CHECK(spec.units[0].content == *Tree().Read("src/rope/rope.cu"));
  CHECK(spec.entries == std::vector<std::string>{"kiln_apply_rope"});
  REQUIRE(spec.arch_families.size() == 1);
  CHECK(spec.arch_families[0].name == "sm_80+");
  CHECK(spec.nvrtc_options == std::vector<std::string>{"-std=c++17"});
  // 16 tokens of 8 threads per block.
  CHECK(spec.launch == std::vector<EntryLaunch>{{.entry = "kiln_apply_rope", .block = 128, .items_per_block = 16}});
  CHECK(spec.params.at("vec") == "8");

  const JitSpec cache = MustGenerate("apply_rope_with_cos_sin_cache",
                                     {{"dtype", "fp16"}, {"rotary_dim", "100"}, {"pos_dtype", "int32"}});
  CHECK(cache.entries == std::vector<std::string>{"kiln_apply_rope_with_cos_sin_cache"});
  CHECK(Contains(cache.headers[0].content, "#define KILN_ROPE_COS_SIN_CACHE 1\n"));
  CHECK(Contains(cache.headers[0].content, "#define KILN_ROPE_T __half\n"));
  CHECK(Contains(cache.headers[0].content, "#define KILN_ROPE_POS int\n"));
  CHECK(cache.params.at("vec") == "2");  // 50 pairs
  REQUIRE(cache.launch.size() == 1);
  CHECK(cache.launch[0].items_per_block == 5);  // tokens of 25 threads (50 / 2)
  CHECK(cache.launch[0].block == 125);
}

TEST_CASE("ChooseRopeShape covers every pair once with blocks of at most 1024 threads", "[rope]") {
  for (int rotary = 2; rotary <= rope::kMaxRotaryDim; rotary += 2) {
    for (int vec : {1, 2, 4, 8}) {
      if ((rotary / 2) % vec != 0) continue;
      INFO("rotary " << rotary << " vec " << vec);
      const RopeLaunchShape s = ChooseRopeShape(rotary, vec);
      CHECK(s.threads_per_token * vec == rotary / 2);
      CHECK(s.block == s.threads_per_token * s.tokens_per_block);
      CHECK(s.block >= 1);
      CHECK(s.block <= 1024);
      CHECK(s.tokens_per_block >= 1);
      // Near the target: a token alone may exceed it (256 threads for 512 scalar pairs).
      CHECK((s.block <= kRopeTargetBlock || s.tokens_per_block == 1));
      CHECK(s.block + s.threads_per_token > kRopeTargetBlock);
    }
  }
  CHECK(ChooseRopeShape(512, 1).block == 256);
  CHECK(ChooseRopeShape(64, 8).tokens_per_block == 32);
}

TEST_CASE("every bad, unknown or missing rope param is INVALID_ARGUMENT naming it", "[rope]") {
  struct Case {
    Params params;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {{{"rotary_dim", "128"}}, {"'dtype'", "required", "fp16, bf16"}},
      {{{"dtype", "fp32"}, {"rotary_dim", "128"}}, {"'dtype'", "'fp32'", "allowed: fp16, bf16"}},
      {{{"dtype", "bf16"}}, {"'rotary_dim'", "required", "2..512"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "127"}}, {"'rotary_dim'", "'127'", "an even integer in 2..512"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "0"}}, {"'rotary_dim'", "'0'"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "514"}}, {"'rotary_dim'", "'514'"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "-2"}}, {"'rotary_dim'", "'-2'"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "12x"}}, {"'rotary_dim'", "'12x'"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "128"}, {"style", "llama"}}, {"'style'", "'llama'", "neox, gptj"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "128"}, {"pos_dtype", "fp32"}}, {"'pos_dtype'", "'fp32'", "int32, int64"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "128"}, {"vec", "16"}}, {"'vec'", "'16'", "allowed here: 1, 2, 4, 8"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "100"}, {"vec", "4"}},
       {"'vec'", "'4'", "divides rotary_dim / 2", "allowed here: 1, 2"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "128"}, {"vec", "3"}}, {"'vec'", "'3'"}},
      {{{"dtype", "bf16"}, {"rotary_dim", "128"}, {"theta", "10000"}},
       {"unknown param 'theta'", "rotary_dim", "style"}},
  };
  for (const char* op : kOps) {
    for (const Case& c : cases) {
      auto spec = Generate(op, c.params);
      REQUIRE(!spec.ok());
      const std::string message(spec.status().message());
      INFO(message);
      CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK(message.starts_with(std::string(op) + ": "));
      for (const std::string& part : c.parts) CHECK(Contains(message, part));
    }
  }
}

TEST_CASE("a kernels tree without the rope unit is FAILED_PRECONDITION", "[rope]") {
  TreeSnapshot empty;
  empty.root = "/nowhere/kernels";
  auto spec = OpRegistry::Builtin().Generate("apply_rope", {{"dtype", "bf16"}, {"rotary_dim", "128"}}, empty);
  REQUIRE(!spec.ok());
  CHECK(spec.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(spec.status().message(), "src/rope/rope.cu"));
}

}  // namespace
}  // namespace kiln::kernels
