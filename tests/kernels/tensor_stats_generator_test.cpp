// The diagnostics op's generator (tensor_stats): registry lookup, readable canonical URIs over
// every dtype, the spec's sources, entry, family and launch hints, and every bad, unknown or
// missing param refused by name.
#include "kernels/ops/diag/tensor_stats_generator.h"

#include <catch2/catch.hpp>
#include <cctype>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

const char* const kDTypes[] = {"fp32", "fp16", "bf16", "int8", "uint8", "int32", "int64"};

using generator_test::Contains;
using generator_test::Tree;

absl::StatusOr<JitSpec> Generate(const Params& params) { return generator_test::Generate("tensor_stats", params); }

JitSpec MustGenerate(const Params& params) { return generator_test::MustGenerate("tensor_stats", params); }

TEST_CASE("the builtin registry serves tensor_stats with one param, dtype, over every dtype", "[diag]") {
  const OpGenerator* generator = OpRegistry::Builtin().Find("tensor_stats");
  REQUIRE(generator != nullptr);
  CHECK(!generator->description().empty());
  const std::vector<ParamInfo> params = generator->params();
  REQUIRE(params.size() == 1);
  CHECK(params[0].name == "dtype");
  CHECK(!params[0].help.empty());
  CHECK(params[0].default_value.empty());  // required
  // Every dtype of kiln::DType: logging takes statistics of any op argument.
  CHECK(params[0].choices == std::vector<std::string>(std::begin(kDTypes), std::end(kDTypes)));
}

TEST_CASE("tensor_stats URIs are readable, canonical and distinct per dtype", "[diag]") {
  CHECK(MustGenerate({{"dtype", "bf16"}}).uri == "tensor_stats_bf16");
  CHECK(MustGenerate({{"dtype", "int64"}}).uri == "tensor_stats_int64");
  std::set<std::string> uris, configs;
  for (const char* dtype : kDTypes) {
    const JitSpec spec = MustGenerate({{"dtype", dtype}});
    CHECK(spec.uri == std::string("tensor_stats_") + dtype);
    CHECK(spec.params == Params{{"dtype", dtype}});
    for (char c : spec.uri) CHECK((std::isalnum(static_cast<unsigned char>(c)) || c == '_'));
    uris.insert(spec.uri);
    configs.insert(spec.headers.at(0).content);
    // Deterministic: equal params give an equal spec.
    const JitSpec again = MustGenerate({{"dtype", dtype}});
    CHECK(again.headers[0].content == spec.headers[0].content);
    CHECK(again.launch == spec.launch);
  }
  CHECK(uris.size() == 7);
  CHECK(configs.size() == 7);
}

TEST_CASE("a tensor_stats spec names its sources and entry and family and launch hints", "[diag]") {
  const JitSpec spec = MustGenerate({{"dtype", "bf16"}});
  CHECK(spec.op == "tensor_stats");
  REQUIRE(spec.headers.size() == 1);
  CHECK(spec.headers[0].name == "kiln_config.cuh");
  CHECK(spec.headers[0].origin == SourceFile::Origin::kGenerated);
  CHECK(Contains(spec.headers[0].content, "#define KILN_STATS_T __nv_bfloat16\n"));
  CHECK(Contains(spec.headers[0].content, "#define KILN_STATS_BLOCK 256\n"));
  REQUIRE(spec.units.size() == 1);
  CHECK(spec.units[0].name == "tensor_stats.cu");
  CHECK(spec.units[0].origin == SourceFile::Origin::kKernels);
  CHECK(spec.units[0].tree_path == "src/diag/tensor_stats.cu");
  CHECK(spec.units[0].content == *Tree().Read("src/diag/tensor_stats.cu"));
  CHECK(!spec.link);
  CHECK(spec.entries == std::vector<std::string>{"kiln_tensor_stats"});
  REQUIRE(spec.arch_families.size() == 1);
  CHECK(spec.arch_families[0].name == "sm_80+");
  CHECK(spec.nvrtc_options == std::vector<std::string>{"-std=c++17"});
  CHECK(spec.launch ==
        std::vector<EntryLaunch>{
            {.entry = "kiln_tensor_stats", .block = kTensorStatsBlock, .max_blocks = kTensorStatsMaxBlocks}});
  CHECK(kTensorStatsBlock % 32 == 0);
  CHECK(spec.compile_memory_mb > 0);

  // The element type of each dtype, as the device code's ToDouble overloads take it.
  const std::pair<const char*, const char*> types[] = {{"fp32", "float"},       {"fp16", "__half"},
                                                       {"int8", "signed char"}, {"uint8", "unsigned char"},
                                                       {"int32", "int"},        {"int64", "long long"}};
  for (const auto& [dtype, type] : types) {
    INFO(dtype);
    CHECK(Contains(MustGenerate({{"dtype", dtype}}).headers[0].content,
                   std::string("#define KILN_STATS_T ") + type + "\n"));
  }
}

TEST_CASE("every bad or unknown or missing tensor_stats param is INVALID_ARGUMENT naming it", "[diag]") {
  struct Case {
    Params params;
    std::vector<std::string> parts;  // the message names these
  };
  const std::vector<Case> cases = {
      {{}, {"'dtype'", "required", "fp32, fp16, bf16, int8, uint8, int32, int64"}},
      {{{"dtype", "fp64"}}, {"'dtype'", "'fp64'", "allowed: fp32, fp16, bf16, int8, uint8, int32, int64"}},
      {{{"dtype", "BF16"}}, {"'dtype'", "'BF16'"}},
      {{{"dtype", "bool"}}, {"'dtype'", "'bool'"}},
      {{{"dtype", ""}}, {"'dtype'", "''"}},
      {{{"dtype", "bf16"}, {"vec", "8"}}, {"unknown param 'vec'", "params are dtype"}},
      {{{"dtype", "bf16"}, {"numel", "4096"}}, {"unknown param 'numel'", "dtype"}},
  };
  for (const Case& c : cases) {
    auto spec = Generate(c.params);
    REQUIRE(!spec.ok());
    const std::string message(spec.status().message());
    INFO(message);
    CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(message.starts_with("tensor_stats: "));
    for (const std::string& part : c.parts) CHECK(Contains(message, part));
  }
}

TEST_CASE("a kernels tree without the tensor_stats unit is FAILED_PRECONDITION", "[diag]") {
  TreeSnapshot empty;
  empty.root = "/nowhere/kernels";
  auto spec = OpRegistry::Builtin().Generate("tensor_stats", {{"dtype", "fp32"}}, empty);
  REQUIRE(!spec.ok());
  CHECK(spec.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(spec.status().message(), "src/diag/tensor_stats.cu"));
  CHECK(Contains(spec.status().message(), "/nowhere/kernels"));
}

}  // namespace
}  // namespace kiln::kernels
