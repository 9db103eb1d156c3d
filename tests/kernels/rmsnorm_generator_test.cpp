#include "kernels/ops/norm/rmsnorm_generator.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

using namespace generator_test;

TEST_CASE("the builtin registry serves rmsnorm and fused_add_rmsnorm", "[rmsnorm]") {
  const OpRegistry& registry = OpRegistry::Builtin();
  REQUIRE(registry.Find("rmsnorm") != nullptr);
  REQUIRE(registry.Find("fused_add_rmsnorm") != nullptr);
  CHECK(registry.Find("layernorm") == nullptr);
  auto unknown = registry.Generate("layernorm", {}, Tree());
  REQUIRE(!unknown.ok());
  CHECK(unknown.status().code() == absl::StatusCode::kNotFound);
  CHECK(Contains(unknown.status().message(), "'layernorm'"));
  // The known ops, sorted (other families' ops may sit between these two).
  const std::string known(unknown.status().message());
  REQUIRE(known.find("fused_add_rmsnorm, ") != std::string::npos);
  REQUIRE(known.find(", rmsnorm") != std::string::npos);
  CHECK(known.find("fused_add_rmsnorm, ") < known.find(", rmsnorm"));
  // Every registered op describes itself and its params; the rmsnorm family's params are
  // {dtype, hidden, vec} (other families are checked by their own tests).
  for (const auto& op : registry.all()) {
    INFO(op->name());
    CHECK(!op->description().empty());
    std::set<std::string> names;
    for (const ParamInfo& param : op->params()) {
      CHECK(!param.name.empty());
      CHECK(!param.help.empty());
      names.insert(param.name);
    }
    CHECK(names.size() == op->params().size());  // no param twice
    if (op->name() == "rmsnorm" || op->name() == "fused_add_rmsnorm") {
      CHECK(names == std::set<std::string>{"dtype", "hidden", "vec"});
    }
  }
}

TEST_CASE("URIs are readable and canonical", "[rmsnorm]") {
  CHECK(MustGenerate("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}}).uri == "rmsnorm_bf16_h4096");
  CHECK(MustGenerate("fused_add_rmsnorm", {{"dtype", "fp16"}, {"hidden", "4095"}}).uri ==
        "fused_add_rmsnorm_fp16_h4095");
  CHECK(MustGenerate("rmsnorm", {{"dtype", "fp32"}, {"hidden", "1"}}).uri == "rmsnorm_fp32_h1");
  CHECK(MustGenerate("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}, {"vec", "4"}}).uri == "rmsnorm_bf16_h4096_v4");
  CHECK(MustGenerate("rmsnorm", {{"dtype", "fp32"}, {"hidden", "4096"}, {"vec", "1"}}).uri == "rmsnorm_fp32_h4096_v1");

  // The default vec, given or omitted, is the same specialization: same URI, same spec.
  const JitSpec omitted = MustGenerate("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}});
  for (const Params& params : {Params{{"dtype", "bf16"}, {"hidden", "4096"}, {"vec", "8"}},
                               Params{{"dtype", "bf16"}, {"hidden", "4096"}, {"vec", "auto"}},
                               Params{{"dtype", "bf16"}, {"hidden", "04096"}}}) {
    const JitSpec given = MustGenerate("rmsnorm", params);
    CHECK(given.uri == omitted.uri);
    CHECK(given.params == omitted.params);
    CHECK(given.headers[0].content == omitted.headers[0].content);
    CHECK(given.launch == omitted.launch);
    CHECK(given.nvrtc_options == omitted.nvrtc_options);
  }
  CHECK(omitted.params == Params{{"dtype", "bf16"}, {"hidden", "4096"}, {"vec", "8"}});
  // Deterministic.
  CHECK(MustGenerate("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}}).headers[0].content ==
        omitted.headers[0].content);
  // Distinct specializations have distinct URIs.
  std::set<std::string> uris;
  size_t specs = 0;
  for (const char* op : {"rmsnorm", "fused_add_rmsnorm"}) {
    for (const char* dtype : {"fp32", "fp16", "bf16"}) {
      for (int hidden : {1, 2, 3, 8, 4095, 4096, 5120, 65536}) {
        for (const char* vec : {"1", "2", "4", "8"}) {
          auto spec = Generate(op, {{"dtype", dtype}, {"hidden", std::to_string(hidden)}, {"vec", vec}});
          if (!spec.ok()) continue;
          ++specs;
          uris.insert(spec->uri);
        }
      }
    }
  }
  CHECK(uris.size() == specs);
}

TEST_CASE("a spec names its sources, entry, family and launch shape", "[rmsnorm]") {
  const JitSpec spec = MustGenerate("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}});
  CHECK(spec.op == "rmsnorm");
  REQUIRE(spec.headers.size() == 1);
  CHECK(spec.headers[0].name == "kiln_config.cuh");
  CHECK(spec.headers[0].origin == SourceFile::Origin::kGenerated);
  const std::string& config = spec.headers[0].content;
  CHECK(Contains(config, "#define KILN_RMSNORM_T __nv_bfloat16\n"));
  CHECK(Contains(config, "#define KILN_RMSNORM_HIDDEN 4096\n"));
  CHECK(Contains(config, "#define KILN_RMSNORM_VEC 8\n"));
  CHECK(Contains(config, "#define KILN_RMSNORM_FUSED_ADD 0\n"));
  REQUIRE(spec.units.size() == 1);
  CHECK(spec.units[0].name == "rmsnorm.cu");
  CHECK(spec.units[0].origin == SourceFile::Origin::kKernels);
  CHECK(spec.units[0].tree_path == "src/norm/rmsnorm.cu");
  CHECK(spec.units[0].content == *Tree().Read("src/norm/rmsnorm.cu"));
  CHECK(!spec.link);
  CHECK(spec.entries == std::vector<std::string>{"kiln_rmsnorm"});
  REQUIRE(spec.arch_families.size() == 1);
  CHECK(spec.arch_families[0].name == "sm_80+");
  CHECK(spec.nvrtc_options == std::vector<std::string>{"-std=c++17"});
  CHECK(spec.launch == std::vector<EntryLaunch>{{.entry = "kiln_rmsnorm", .block = 128, .items_per_block = 1}});
  CHECK(spec.compile_memory_mb > 0);

  const JitSpec fused = MustGenerate("fused_add_rmsnorm", {{"dtype", "fp16"}, {"hidden", "8"}});
  CHECK(fused.entries == std::vector<std::string>{"kiln_fused_add_rmsnorm"});
  CHECK(Contains(fused.headers[0].content, "#define KILN_RMSNORM_FUSED_ADD 1\n"));
  CHECK(Contains(fused.headers[0].content, "#define KILN_RMSNORM_T __half\n"));
  REQUIRE(fused.launch.size() == 1);
  CHECK(fused.launch[0].block == 128);
  CHECK(fused.launch[0].items_per_block == 128);  // rows per block; hidden 8 = one vector: a lane per row
}

TEST_CASE("ChooseRmsNormShape gives whole warps, covers the row and keeps rows in registers", "[rmsnorm]") {
  for (int hidden = 1; hidden <= 65536; hidden += (hidden < 300 ? 1 : 97)) {
    for (int vec : {1, 2, 4, 8}) {
      for (int bytes : {2, 4}) {
        if (hidden % vec != 0 || vec * bytes > 16) continue;
        const RmsNormLaunchShape shape = ChooseRmsNormShape(hidden, vec, bytes);
        const int vectors = hidden / vec;
        INFO("hidden " << hidden << " vec " << vec << " bytes " << bytes);
        REQUIRE(shape.vec == vec);
        CHECK(shape.block == shape.threads_per_row * shape.rows_per_block);
        CHECK(shape.block % 32 == 0);
        CHECK(shape.block <= 1024);
        if (shape.threads_per_row <= 32) {
          CHECK((32 % shape.threads_per_row) == 0);
        } else {
          CHECK(shape.threads_per_row % 32 == 0);
          CHECK(shape.rows_per_block == 1);
        }
        // Every vector has a slot; no thread's last slot lies wholly past the row.
        CHECK(shape.items_per_thread * shape.threads_per_row >= vectors);
        CHECK((shape.items_per_thread - 1) * shape.threads_per_row < vectors);
        if (vectors <= 4096) CHECK(shape.items_per_thread <= 4);
      }
    }
  }
  CHECK(ChooseRmsNormShape(65536, 8, 2).items_per_thread == 16);
  CHECK(ChooseRmsNormShape(65536, 8, 2).block == 512);
  CHECK(ChooseRmsNormShape(65536, 4, 4).block == 1024);  // 256 KB: no block holds it in registers
  CHECK(ChooseRmsNormShape(32768, 8, 2).block == 1024);
  CHECK(ChooseRmsNormShape(4096, 8, 2).block == 128);
  CHECK(ChooseRmsNormShape(4096, 4, 4).block == 256);
  CHECK(ChooseRmsNormShape(1, 1, 4).rows_per_block == 128);
  CHECK(ChooseRmsNormShape(1024, 8, 2).threads_per_row == 32);
  CHECK(ChooseRmsNormShape(1024, 8, 2).rows_per_block == 4);
}

TEST_CASE("every bad, unknown or missing param is INVALID_ARGUMENT naming it", "[rmsnorm]") {
  struct Case {
    Params params;
    std::vector<std::string> parts;  // the message names these
  };
  const std::vector<Case> cases = {
      {{{"hidden", "4096"}}, {"'dtype'", "required", "fp32, fp16, bf16"}},
      {{{"dtype", "fp64"}, {"hidden", "4096"}}, {"'dtype'", "'fp64'", "allowed: fp32, fp16, bf16"}},
      {{{"dtype", "BF16"}, {"hidden", "4096"}}, {"'dtype'", "'BF16'"}},
      {{{"dtype", "bf16"}}, {"'hidden'", "required", "1..65536"}},
      {{{"dtype", "bf16"}, {"hidden", "0"}}, {"'hidden'", "'0'", "1..65536"}},
      {{{"dtype", "bf16"}, {"hidden", "65537"}}, {"'hidden'", "'65537'", "1..65536"}},
      {{{"dtype", "bf16"}, {"hidden", "-1"}}, {"'hidden'", "'-1'"}},
      {{{"dtype", "bf16"}, {"hidden", "+4"}}, {"'hidden'", "'+4'"}},
      {{{"dtype", "bf16"}, {"hidden", "4k"}}, {"'hidden'", "'4k'"}},
      {{{"dtype", "bf16"}, {"hidden", "4096 "}}, {"'hidden'", "'4096 '"}},
      {{{"dtype", "bf16"}, {"hidden", ""}}, {"'hidden'", "''"}},
      {{{"dtype", "bf16"}, {"hidden", "99999999999"}}, {"'hidden'"}},
      {{{"dtype", "bf16"}, {"hidden", "4096"}, {"vec", "3"}}, {"'vec'", "'3'", "a power of two in 1..16"}},
      {{{"dtype", "bf16"}, {"hidden", "4096"}, {"vec", "0"}}, {"'vec'", "'0'"}},
      {{{"dtype", "bf16"}, {"hidden", "4096"}, {"vec", "16"}},
       {"'vec'", "'16'", "2 bytes <= 16", "allowed here: 1, 2, 4, 8"}},
      {{{"dtype", "fp32"}, {"hidden", "4096"}, {"vec", "8"}}, {"'vec'", "'8'", "allowed here: 1, 2, 4"}},
      {{{"dtype", "fp16"}, {"hidden", "4094"}, {"vec", "4"}}, {"'vec'", "'4'", "divides hidden", "allowed here: 1, 2"}},
      {{{"dtype", "fp16"}, {"hidden", "4095"}, {"vec", "2"}}, {"'vec'", "allowed here: 1"}},
      {{{"dtype", "fp16"}, {"hidden", "64"}, {"vec", "x"}}, {"'vec'", "'x'"}},
      {{{"dtype", "bf16"}, {"hidden", "4096"}, {"eps", "1e-6"}}, {"unknown param 'eps'", "dtype", "hidden", "vec"}},
      {{{"dtype", "bf16"}, {"hidden", "4096"}, {"", "x"}}, {"unknown param ''"}},
  };
  for (const char* op : {"rmsnorm", "fused_add_rmsnorm"}) {
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

TEST_CASE("a kernels tree without the rmsnorm unit is FAILED_PRECONDITION", "[rmsnorm]") {
  TreeSnapshot empty;
  empty.root = "/nowhere/kernels";
  auto spec = OpRegistry::Builtin().Generate("rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}}, empty);
  REQUIRE(!spec.ok());
  CHECK(spec.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Contains(spec.status().message(), "src/norm/rmsnorm.cu"));
  CHECK(Contains(spec.status().message(), "/nowhere/kernels"));
}

}  // namespace
}  // namespace kiln::kernels
