// The decode family's generators (batch_decode, append_paged_kv): registry lookup, readable and
// canonical URIs, the spec of a specialization (sources, entries, family, launch shape), and
// every bad, unknown or missing param refused with INVALID_ARGUMENT naming it.
#include "kernels/ops/decode/batch_decode_generator.h"
#include "kernels/ops/decode/append_paged_kv_generator.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

using namespace generator_test;

void RequireInvalid(const std::string& op, const Params& params, const std::string& fragment) {
  auto spec = Generate(op, params);
  INFO(op << ": " << spec.status().ToString());
  REQUIRE(!spec.ok());
  CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(spec.status().message(), fragment));
}

Params Decode(const char* dtype, const char* head_dim, const char* group, const char* page_size) {
  return {{"dtype", dtype}, {"head_dim", head_dim}, {"group", group}, {"page_size", page_size}};
}

TEST_CASE("the registry serves batch_decode and append_paged_kv with their params", "[decode]") {
  const OpRegistry& registry = OpRegistry::Builtin();
  const OpGenerator* decode = registry.Find("batch_decode");
  const OpGenerator* append = registry.Find("append_paged_kv");
  REQUIRE(decode != nullptr);
  REQUIRE(append != nullptr);
  std::set<std::string> names;
  for (const ParamInfo& param : decode->params()) names.insert(param.name);
  CHECK(names == std::set<std::string>{"dtype", "head_dim", "group", "page_size", "soft_cap"});
  names.clear();
  for (const ParamInfo& param : append->params()) names.insert(param.name);
  CHECK(names == std::set<std::string>{"dtype", "head_dim", "vec"});
  CHECK(!decode->description().empty());
  CHECK(!append->description().empty());
}

TEST_CASE("batch_decode URIs are readable, canonical and distinct", "[decode]") {
  CHECK(MustGenerate("batch_decode", Decode("bf16", "128", "4", "16")).uri == "batch_decode_bf16_d128_g4_p16");
  Params capped = Decode("fp16", "64", "1", "1");
  capped["soft_cap"] = "1";
  CHECK(MustGenerate("batch_decode", capped).uri == "batch_decode_fp16_d64_g1_p1_softcap");

  // soft_cap=0 given or omitted, and zero-padded numbers, are one specialization.
  const JitSpec omitted = MustGenerate("batch_decode", Decode("bf16", "128", "4", "16"));
  Params given = Decode("bf16", "0128", "04", "016");
  given["soft_cap"] = "0";
  const JitSpec spelled = MustGenerate("batch_decode", given);
  CHECK(spelled.uri == omitted.uri);
  CHECK(spelled.params == omitted.params);
  CHECK(spelled.headers[0].content == omitted.headers[0].content);
  CHECK(omitted.params ==
        Params{{"dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}, {"page_size", "16"}, {"soft_cap", "0"}});

  std::set<std::string> uris;
  size_t specs = 0;
  for (const char* dtype : {"fp16", "bf16"})
    for (const char* head_dim : {"64", "128", "256"})
      for (const char* group : {"1", "2", "4", "8"})
        for (const char* page_size : {"1", "16", "64", "256"})
          for (const char* soft_cap : {"0", "1"}) {
            Params params = Decode(dtype, head_dim, group, page_size);
            params["soft_cap"] = soft_cap;
            uris.insert(MustGenerate("batch_decode", params).uri);
            ++specs;
          }
  CHECK(uris.size() == specs);
}

TEST_CASE("a batch_decode spec names its sources, entries, family and launch shape", "[decode]") {
  const JitSpec spec = MustGenerate("batch_decode", Decode("bf16", "128", "4", "16"));
  CHECK(spec.op == "batch_decode");
  REQUIRE(spec.headers.size() == 1);
  CHECK(spec.headers[0].name == "kiln_config.cuh");
  const std::string& config = spec.headers[0].content;
  CHECK(Contains(config, "#define KILN_DECODE_T __nv_bfloat16\n"));
  CHECK(Contains(config, "#define KILN_DECODE_HEAD_DIM 128\n"));
  CHECK(Contains(config, "#define KILN_DECODE_GROUP 4\n"));
  CHECK(Contains(config, "#define KILN_DECODE_PAGE_SIZE 16\n"));
  CHECK(Contains(config, "#define KILN_DECODE_SOFT_CAP 0\n"));
  CHECK(Contains(config, "#define KILN_DECODE_STAGES 3\n"));
  REQUIRE(spec.units.size() == 1);
  CHECK(spec.units[0].tree_path == "src/decode/batch_decode.cu");
  CHECK(spec.units[0].content == *Tree().Read("src/decode/batch_decode.cu"));
  CHECK(spec.entries == std::vector<std::string>{"kiln_batch_decode", "kiln_batch_decode_merge"});
  REQUIRE(spec.arch_families.size() == 1);
  CHECK(spec.arch_families[0].name == "sm_80+");
  CHECK(spec.nvrtc_options == std::vector<std::string>{"-std=c++17"});
  // The attention kernel: 4 warps, a 3-stage pipeline of 64-token tiles in 96 KiB; the merge:
  // 128 threads, one query head per block (its 4 warps share the items).
  CHECK(spec.launch ==
        std::vector<EntryLaunch>{{.entry = "kiln_batch_decode", .block = 128, .dynamic_smem = 98304},
                                 {.entry = "kiln_batch_decode_merge", .block = 128, .items_per_block = 1}});
  CHECK(Contains(config, "#define KILN_DECODE_STAGES 3\n"));
  CHECK(Contains(config, "#define KILN_DECODE_WARPS 4\n"));
  // The pipeline per head dim: 64 / 96 / 96 KiB of shared memory; 2 warps at 256.
  CHECK(ChooseBatchDecodeShape(64).dynamic_smem == 64 * 1024);
  CHECK(ChooseBatchDecodeShape(64).stages == 4);
  const BatchDecodeLaunchShape wide = ChooseBatchDecodeShape(256);
  CHECK(wide.dynamic_smem == 96 * 1024);
  CHECK(wide.stages == 3);
  CHECK(wide.block == 64);
  CHECK(wide.tile_tokens == 32);
  CHECK(Contains(MustGenerate("batch_decode", Decode("bf16", "256", "2", "16")).headers[0].content,
                 "#define KILN_DECODE_WARPS 2\n"));
  CHECK(Contains(MustGenerate("batch_decode", Decode("fp16", "64", "8", "1")).headers[0].content,
                 "#define KILN_DECODE_T __half\n"));
}

TEST_CASE("batch_decode refuses bad, unknown and missing params by name", "[decode]") {
  RequireInvalid("batch_decode", Decode("fp32", "128", "4", "16"),
                 "batch_decode: param 'dtype' = 'fp32' is not allowed; allowed: fp16, bf16");
  RequireInvalid("batch_decode", Decode("bf16", "96", "4", "16"),
                 "batch_decode: param 'head_dim' = '96' is not allowed; allowed: 64, 128, 256");
  RequireInvalid("batch_decode", Decode("bf16", "128", "3", "16"),
                 "batch_decode: param 'group' = '3' is not allowed; allowed: 1, 2, 4, 8");
  RequireInvalid("batch_decode", Decode("bf16", "128", "16", "16"), "param 'group' = '16' is not allowed");
  RequireInvalid("batch_decode", Decode("bf16", "128", "4", "24"),
                 "batch_decode: param 'page_size' = '24' is not allowed; allowed: a power of two in 1..256");
  RequireInvalid("batch_decode", Decode("bf16", "128", "4", "512"), "param 'page_size' = '512'");
  RequireInvalid("batch_decode", Decode("bf16", "128", "4", "-16"), "param 'page_size' = '-16'");
  RequireInvalid("batch_decode", Decode("bf16", "1e2", "4", "16"), "param 'head_dim' = '1e2'");
  Params capped = Decode("bf16", "128", "4", "16");
  capped["soft_cap"] = "yes";
  RequireInvalid("batch_decode", capped, "param 'soft_cap' = 'yes' is not allowed; allowed: 0, 1");
  Params unknown = Decode("bf16", "128", "4", "16");
  unknown["window"] = "128";
  RequireInvalid("batch_decode", unknown, "batch_decode: unknown param 'window' (= '128')");
  RequireInvalid("batch_decode", {{"dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}},
                 "batch_decode: param 'page_size' is required");
  RequireInvalid("batch_decode", {}, "batch_decode: param 'dtype' is required; allowed: fp16, bf16");
}

TEST_CASE("append_paged_kv URIs, spec and refusals", "[decode]") {
  const JitSpec spec = MustGenerate("append_paged_kv", {{"dtype", "bf16"}, {"head_dim", "128"}});
  CHECK(spec.uri == "append_paged_kv_bf16_d128");
  CHECK(spec.params == Params{{"dtype", "bf16"}, {"head_dim", "128"}, {"vec", "8"}});
  CHECK(MustGenerate("append_paged_kv", {{"dtype", "bf16"}, {"head_dim", "128"}, {"vec", "8"}}).uri == spec.uri);
  CHECK(MustGenerate("append_paged_kv", {{"dtype", "bf16"}, {"head_dim", "128"}, {"vec", "auto"}}).uri == spec.uri);
  CHECK(MustGenerate("append_paged_kv", {{"dtype", "fp16"}, {"head_dim", "64"}, {"vec", "2"}}).uri ==
        "append_paged_kv_fp16_d64_v2");
  CHECK(spec.entries == std::vector<std::string>{"kiln_append_paged_kv"});
  CHECK(spec.units[0].tree_path == "src/decode/append_paged_kv.cu");
  CHECK(spec.arch_families[0].name == "sm_80+");
  CHECK(spec.launch == std::vector<EntryLaunch>{{.entry = "kiln_append_paged_kv", .block = 256, .max_blocks = 8192}});
  CHECK(Contains(spec.headers[0].content, "#define KILN_APPEND_VEC 8\n"));

  RequireInvalid("append_paged_kv", {{"dtype", "fp32"}, {"head_dim", "128"}},
                 "append_paged_kv: param 'dtype' = 'fp32' is not allowed; allowed: fp16, bf16");
  RequireInvalid("append_paged_kv", {{"dtype", "bf16"}, {"head_dim", "96"}},
                 "append_paged_kv: param 'head_dim' = '96' is not allowed; allowed: 64, 128, 256");
  RequireInvalid("append_paged_kv", {{"dtype", "bf16"}, {"head_dim", "128"}, {"vec", "3"}},
                 "param 'vec' = '3' is not allowed; allowed: a power of two in 1..16");
  RequireInvalid("append_paged_kv", {{"dtype", "bf16"}, {"head_dim", "128"}, {"vec", "16"}},
                 "param 'vec' = '16' is not allowed for dtype bf16: vec is a power of two with vec * 2 bytes <= 16; "
                 "allowed here: 1, 2, 4, 8");
  RequireInvalid("append_paged_kv", {{"dtype", "bf16"}, {"head_dim", "128"}, {"page_size", "16"}},
                 "append_paged_kv: unknown param 'page_size'");
  RequireInvalid("append_paged_kv", {{"dtype", "bf16"}}, "param 'head_dim' is required");
}

TEST_CASE("a kernels tree without the decode units fails the precondition", "[decode]") {
  TreeSnapshot tree = Tree();
  tree.files.erase("src/decode/batch_decode.cu");
  tree.files.erase("src/decode/append_paged_kv.cu");
  for (const char* op : {"batch_decode", "append_paged_kv"}) {
    Params params = std::string(op) == "batch_decode" ? Decode("bf16", "128", "4", "16")
                                                      : Params{{"dtype", "bf16"}, {"head_dim", "128"}};
    auto spec = OpRegistry::Builtin().Generate(op, params, tree);
    INFO(spec.status().ToString());
    REQUIRE(!spec.ok());
    CHECK(spec.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(Contains(spec.status().message(), "src/decode/"));
  }
}

}  // namespace
}  // namespace kiln::kernels
