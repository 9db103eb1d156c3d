// The sampling family's generators (kernels/ops/sampling/sampling_generator.cpp): registry
// entries, canonical readable URIs, the spec's sources, entry, family and launch hints, and
// every bad, unknown or missing param refused by name.
#include <catch2/catch.hpp>
#include <cctype>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/sampling/sampling_contract.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

const char* const kOps[] = {"top_k_sampling", "top_p_sampling", "top_k_top_p_sampling", "min_p_sampling", "argmax"};

using namespace generator_test;

TEST_CASE("the builtin registry serves the five sampling ops with params {out_dtype, vec, cluster}", "[sampling]") {
  for (const char* name : kOps) {
    INFO(name);
    const OpGenerator* op = OpRegistry::Builtin().Find(name);
    REQUIRE(op != nullptr);
    CHECK(!op->description().empty());
    std::set<std::string> names;
    for (const ParamInfo& param : op->params()) {
      CHECK(!param.help.empty());
      names.insert(param.name);
    }
    CHECK(names == std::set<std::string>{"out_dtype", "vec", "cluster"});
  }
}

TEST_CASE("sampling URIs are readable and canonical", "[sampling]") {
  CHECK(MustGenerate("top_k_sampling", {}).uri == "top_k_sampling_int32");
  CHECK(MustGenerate("top_p_sampling", {{"out_dtype", "int64"}}).uri == "top_p_sampling_int64");
  CHECK(MustGenerate("top_k_top_p_sampling", {{"vec", "1"}}).uri == "top_k_top_p_sampling_int32_v1");
  CHECK(MustGenerate("min_p_sampling", {{"out_dtype", "int64"}, {"vec", "2"}}).uri == "min_p_sampling_int64_v2");
  CHECK(MustGenerate("argmax", {{"vec", "4"}}).uri == "argmax_int32");
  CHECK(MustGenerate("top_p_sampling", {{"cluster", "8"}}).uri == "top_p_sampling_int32_c8");
  CHECK(MustGenerate("min_p_sampling", {{"vec", "1"}, {"cluster", "2"}}).uri == "min_p_sampling_int32_v1_c2");

  // Omitted, default and "auto" spellings are one specialization.
  const JitSpec omitted = MustGenerate("top_k_sampling", {});
  for (const Params& params : {Params{{"out_dtype", "int32"}}, Params{{"vec", "4"}}, Params{{"vec", "auto"}},
                               Params{{"out_dtype", "int32"}, {"vec", "4"}}, Params{{"cluster", "1"}}}) {
    const JitSpec given = MustGenerate("top_k_sampling", params);
    CHECK(given.uri == omitted.uri);
    CHECK(given.params == omitted.params);
    CHECK(given.headers[0].content == omitted.headers[0].content);
    CHECK(given.launch == omitted.launch);
  }
  CHECK(omitted.params == Params{{"out_dtype", "int32"}, {"vec", "4"}, {"cluster", "1"}});

  std::set<std::string> uris;
  size_t specs = 0;
  for (const char* op : kOps) {
    for (const char* out : {"int32", "int64"}) {
      for (const char* vec : {"1", "2", "4"}) {
        for (const char* cluster : {"1", "2", "4", "8"}) {
          const JitSpec spec = MustGenerate(op, {{"out_dtype", out}, {"vec", vec}, {"cluster", cluster}});
          ++specs;
          uris.insert(spec.uri);
          for (char c : spec.uri) CHECK((std::isalnum(static_cast<unsigned char>(c)) || c == '_'));
        }
      }
    }
  }
  CHECK(uris.size() == specs);
}

TEST_CASE("a sampling spec names its unit, entry, config, family and launch shape", "[sampling]") {
  const JitSpec spec = MustGenerate("top_k_top_p_sampling", {{"out_dtype", "int64"}, {"vec", "2"}});
  CHECK(spec.op == "top_k_top_p_sampling");
  REQUIRE(spec.units.size() == 1);
  CHECK(spec.units[0].name == "sampling.cu");
  CHECK(spec.units[0].tree_path == "src/sampling/sampling.cu");
  CHECK(spec.units[0].content == *Tree().Read("src/sampling/sampling.cu"));
  REQUIRE(spec.headers.size() == 1);
  CHECK(spec.headers[0].name == "kiln_config.cuh");
  CHECK(spec.headers[0].origin == SourceFile::Origin::kGenerated);
  const std::string& config = spec.headers[0].content;
  CHECK(Contains(config, "#define KILN_SAMPLING_OP kTopKTopP\n"));
  CHECK(Contains(config, "#define KILN_SAMPLING_ENTRY kiln_top_k_top_p_sampling\n"));
  CHECK(Contains(config, "#define KILN_SAMPLING_OUT long long\n"));
  CHECK(Contains(config, "#define KILN_SAMPLING_VEC 2\n"));
  CHECK(Contains(config, "#define KILN_SAMPLING_THREADS 1024\n"));
  CHECK(Contains(config, "#define KILN_SAMPLING_USES_LIST 1\n"));
  CHECK(spec.entries == std::vector<std::string>{"kiln_top_k_top_p_sampling"});
  REQUIRE(spec.arch_families.size() == 1);
  CHECK(spec.arch_families[0].name == "sm_80+");
  CHECK(spec.nvrtc_options == std::vector<std::string>{"-std=c++17"});
  CHECK(spec.launch ==
        std::vector<EntryLaunch>{
            {.entry = "kiln_top_k_top_p_sampling", .block = 1024, .dynamic_smem = 98304, .items_per_block = 1}});
  CHECK(spec.params.at("vec") == "2");
  CHECK(spec.compile_memory_mb > 0);

  // min_p and argmax keep no list: no dynamic shared memory.
  for (const char* op : {"min_p_sampling", "argmax"}) {
    const JitSpec s = MustGenerate(op, {});
    REQUIRE(s.launch.size() == 1);
    CHECK(s.launch[0].dynamic_smem == 0);
    CHECK(Contains(s.headers[0].content, "#define KILN_SAMPLING_USES_LIST 0\n"));
    CHECK(Contains(s.headers[0].content, "#define KILN_SAMPLING_OUT int\n"));
  }
  CHECK(MustGenerate("argmax", {}).entries == std::vector<std::string>{"kiln_argmax"});
  CHECK(MustGenerate("min_p_sampling", {}).entries == std::vector<std::string>{"kiln_min_p_sampling"});
  CHECK(MustGenerate("top_p_sampling", {}).entries == std::vector<std::string>{"kiln_top_p_sampling"});
  CHECK(MustGenerate("top_k_sampling", {}).entries == std::vector<std::string>{"kiln_top_k_sampling"});
  CHECK(sampling::kSelectSmemBytes == 98304);
  CHECK(Contains(config, "#define KILN_SAMPLING_CLUSTER 1\n"));
}

TEST_CASE("a sampling spec over a cluster is sm_90+ with one more histogram of shared memory", "[sampling]") {
  for (const char* cluster : {"2", "4", "8"}) {
    INFO(cluster);
    const JitSpec spec = MustGenerate("top_k_sampling", {{"cluster", cluster}});
    REQUIRE(spec.arch_families.size() == 1);
    CHECK(spec.arch_families[0].name == "sm_90+");
    CHECK(spec.params.at("cluster") == cluster);
    CHECK(Contains(spec.headers[0].content, std::string("#define KILN_SAMPLING_CLUSTER ") + cluster + "\n"));
    REQUIRE(spec.launch.size() == 1);
    CHECK(spec.launch[0].dynamic_smem == sampling::kClusterSelectSmemBytes);
    CHECK(MustGenerate("argmax", {{"cluster", cluster}}).launch[0].dynamic_smem == 0);
  }
  CHECK(sampling::kClusterSelectSmemBytes == 98304 + 16384);
  // A block per row stays on the whole family.
  CHECK(MustGenerate("top_k_sampling", {{"cluster", "1"}}).arch_families[0].name == "sm_80+");
  // Below sm_90 a cluster spec is refused before anything compiles, naming the family.
  const JitSpec spec = MustGenerate("top_p_sampling", {{"cluster", "4"}});
  auto arch = ResolveArch(*GpuArch::Parse("sm_80"), spec.arch_families, spec.uri);
  REQUIRE(!arch.ok());
  CHECK(Contains(std::string(arch.status().message()), "sm_90+"));
  CHECK(ResolveArch(*GpuArch::Parse("sm_90"), spec.arch_families, spec.uri).ok());
}

TEST_CASE("every bad or unknown sampling param is INVALID_ARGUMENT naming it", "[sampling]") {
  struct Case {
    Params params;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {{{"out_dtype", "int16"}}, {"'out_dtype'", "'int16'", "allowed: int32, int64"}},
      {{{"out_dtype", "INT32"}}, {"'out_dtype'", "'INT32'"}},
      {{{"out_dtype", ""}}, {"'out_dtype'", "''"}},
      {{{"vec", "8"}}, {"'vec'", "'8'", "allowed here: 1, 2, 4"}},
      {{{"vec", "3"}}, {"'vec'", "'3'"}},
      {{{"vec", "x"}}, {"'vec'", "'x'"}},
      {{{"dtype", "fp32"}}, {"unknown param 'dtype'", "out_dtype", "vec"}},
      {{{"k", "50"}}, {"unknown param 'k'"}},
      {{{"cluster", "3"}}, {"'cluster'", "'3'", "allowed: 1, 2, 4, 8"}},
      {{{"cluster", "16"}}, {"'cluster'", "'16'"}},
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

TEST_CASE("a kernels tree without the sampling unit is FAILED_PRECONDITION", "[sampling]") {
  TreeSnapshot empty;
  empty.root = "/nowhere/kernels";
  auto spec = OpRegistry::Builtin().Generate("top_p_sampling", {}, empty);
  REQUIRE(!spec.ok());
  CHECK(spec.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(spec.status().message(), "src/sampling/sampling.cu"));
}

}  // namespace
}  // namespace kiln::kernels
