// The activation family's generators (silu_and_mul, gelu_and_mul, gelu_tanh_and_mul): registry
// lookup, readable canonical URIs, the spec's sources, entry, family and launch hints, the
// launch-shape rule, and every bad, unknown or missing param refused by name.
#include "kernels/ops/activation/act_and_mul_generator.h"

#include <catch2/catch.hpp>
#include <cctype>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

const char* const kOps[] = {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"};

using namespace generator_test;

TEST_CASE("the builtin registry serves the three gated activations", "[activation]") {
  for (const char* op : kOps) {
    INFO(op);
    const OpGenerator* generator = OpRegistry::Builtin().Find(op);
    REQUIRE(generator != nullptr);
    CHECK(!generator->description().empty());
    std::set<std::string> names;
    for (const ParamInfo& param : generator->params()) {
      CHECK(!param.help.empty());
      names.insert(param.name);
    }
    // d is a launch argument, not a param: one specialization serves every d.
    CHECK(names == std::set<std::string>{"dtype", "vec"});
  }
}

TEST_CASE("activation URIs are readable and canonical", "[activation]") {
  CHECK(MustGenerate("silu_and_mul", {{"dtype", "bf16"}}).uri == "silu_and_mul_bf16");
  CHECK(MustGenerate("gelu_and_mul", {{"dtype", "fp16"}}).uri == "gelu_and_mul_fp16");
  CHECK(MustGenerate("gelu_tanh_and_mul", {{"dtype", "bf16"}, {"vec", "1"}}).uri == "gelu_tanh_and_mul_bf16_v1");
  CHECK(MustGenerate("silu_and_mul", {{"dtype", "fp16"}, {"vec", "4"}}).uri == "silu_and_mul_fp16_v4");

  // The default vec, given, omitted or 'auto', is one specialization: same URI, same spec.
  const JitSpec omitted = MustGenerate("silu_and_mul", {{"dtype", "bf16"}});
  for (const Params& params : {Params{{"dtype", "bf16"}, {"vec", "8"}}, Params{{"dtype", "bf16"}, {"vec", "auto"}},
                               Params{{"dtype", "bf16"}, {"vec", "08"}}}) {
    const JitSpec given = MustGenerate("silu_and_mul", params);
    CHECK(given.uri == omitted.uri);
    CHECK(given.params == omitted.params);
    CHECK(given.headers[0].content == omitted.headers[0].content);
    CHECK(given.launch == omitted.launch);
  }
  CHECK(omitted.params == Params{{"dtype", "bf16"}, {"vec", "8"}});
  CHECK(MustGenerate("silu_and_mul", {{"dtype", "bf16"}}).headers[0].content == omitted.headers[0].content);

  // The whole space: 3 ops x 2 dtypes x 4 vecs, every URI distinct and one path component.
  std::set<std::string> uris;
  for (const char* op : kOps)
    for (const char* dtype : {"fp16", "bf16"})
      for (const char* vec : {"1", "2", "4", "8"}) {
        const JitSpec spec = MustGenerate(op, {{"dtype", dtype}, {"vec", vec}});
        for (char c : spec.uri) CHECK((std::isalnum(static_cast<unsigned char>(c)) || c == '_'));
        uris.insert(spec.uri);
      }
  CHECK(uris.size() == 24);
}

TEST_CASE("an activation spec names its sources and entry and family and launch shape", "[activation]") {
  const JitSpec spec = MustGenerate("silu_and_mul", {{"dtype", "bf16"}});
  CHECK(spec.op == "silu_and_mul");
  REQUIRE(spec.headers.size() == 1);
  CHECK(spec.headers[0].name == "kiln_config.cuh");
  CHECK(spec.headers[0].origin == SourceFile::Origin::kGenerated);
  const std::string& config = spec.headers[0].content;
  CHECK(Contains(config, "#define KILN_ACT_KIND 0\n"));
  CHECK(Contains(config, "#define KILN_ACT_T __nv_bfloat16\n"));
  CHECK(Contains(config, "#define KILN_ACT_VEC 8\n"));
  CHECK(Contains(config, "#define KILN_ACT_BLOCK 128\n"));
  CHECK(Contains(config, "#define KILN_ACT_ITEMS 4\n"));
  REQUIRE(spec.units.size() == 1);
  CHECK(spec.units[0].name == "act_and_mul.cu");
  CHECK(spec.units[0].origin == SourceFile::Origin::kKernels);
  CHECK(spec.units[0].tree_path == "src/activation/act_and_mul.cu");
  CHECK(spec.units[0].content == *Tree().Read("src/activation/act_and_mul.cu"));
  CHECK(!spec.link);
  CHECK(spec.entries == std::vector<std::string>{"kiln_silu_and_mul"});
  REQUIRE(spec.arch_families.size() == 1);
  CHECK(spec.arch_families[0].name == "sm_80+");
  CHECK(spec.nvrtc_options == std::vector<std::string>{"-std=c++17"});
  CHECK(spec.launch == std::vector<EntryLaunch>{{.entry = "kiln_silu_and_mul", .block = 128, .items_per_block = 4096}});
  CHECK(spec.compile_memory_mb > 0);

  const JitSpec gelu = MustGenerate("gelu_and_mul", {{"dtype", "fp16"}, {"vec", "1"}});
  CHECK(gelu.entries == std::vector<std::string>{"kiln_gelu_and_mul"});
  CHECK(Contains(gelu.headers[0].content, "#define KILN_ACT_KIND 1\n"));
  CHECK(Contains(gelu.headers[0].content, "#define KILN_ACT_T __half\n"));
  CHECK(Contains(gelu.headers[0].content, "#define KILN_ACT_ITEMS 16\n"));
  REQUIRE(gelu.launch.size() == 1);
  CHECK(gelu.launch[0].items_per_block == 2048);  // columns of d per block
  const JitSpec tanh = MustGenerate("gelu_tanh_and_mul", {{"dtype", "bf16"}, {"vec", "2"}});
  CHECK(tanh.entries == std::vector<std::string>{"kiln_gelu_tanh_and_mul"});
  CHECK(Contains(tanh.headers[0].content, "#define KILN_ACT_KIND 2\n"));
}

TEST_CASE("ChooseActAndMulShape gives whole warps and 64 bytes of each half per thread", "[activation]") {
  for (int vec : {1, 2, 4, 8}) {
    const ActAndMulLaunchShape shape = ChooseActAndMulShape(vec, 2);
    INFO("vec " << vec);
    CHECK(shape.vec == vec);
    CHECK(shape.block % 32 == 0);
    CHECK(shape.cols_per_block == shape.block * shape.items_per_thread * vec);
    CHECK(shape.items_per_thread * vec * 2 == (vec == 1 ? 32 : 64));
  }
}

TEST_CASE("every bad or unknown or missing activation param is INVALID_ARGUMENT naming it", "[activation]") {
  struct Case {
    Params params;
    std::vector<std::string> parts;  // the message names these
  };
  const std::vector<Case> cases = {
      {{}, {"'dtype'", "required", "fp16, bf16"}},
      {{{"dtype", "fp32"}}, {"'dtype'", "'fp32'", "allowed: fp16, bf16"}},
      {{{"dtype", "fp64"}}, {"'dtype'", "'fp64'"}},
      {{{"dtype", "BF16"}}, {"'dtype'", "'BF16'"}},
      {{{"dtype", "bf16"}, {"vec", "3"}}, {"'vec'", "'3'", "allowed: a power of two in 1..16"}},
      {{{"dtype", "bf16"}, {"vec", "0"}}, {"'vec'", "'0'"}},
      {{{"dtype", "bf16"}, {"vec", "16"}}, {"'vec'", "'16'", "2 bytes <= 16", "allowed here: 1, 2, 4, 8"}},
      {{{"dtype", "fp16"}, {"vec", "x"}}, {"'vec'", "'x'"}},
      {{{"dtype", "fp16"}, {"vec", "-8"}}, {"'vec'", "'-8'"}},
      {{{"dtype", "bf16"}, {"d", "4096"}}, {"unknown param 'd'", "dtype", "vec"}},
      {{{"dtype", "bf16"}, {"hidden", "4096"}}, {"unknown param 'hidden'"}},
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

TEST_CASE("a kernels tree without the activation unit is FAILED_PRECONDITION", "[activation]") {
  TreeSnapshot empty;
  empty.root = "/nowhere/kernels";
  auto spec = OpRegistry::Builtin().Generate("silu_and_mul", {{"dtype", "bf16"}}, empty);
  REQUIRE(!spec.ok());
  CHECK(spec.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(spec.status().message(), "src/activation/act_and_mul.cu"));
  CHECK(Contains(spec.status().message(), "/nowhere/kernels"));
}

}  // namespace
}  // namespace kiln::kernels
