// The prefill family's generators (batch_prefill_ragged, batch_prefill_paged): registry lookup,
// readable and canonical URIs, the spec of a specialization (sources, entries, arch family,
// launch shape from the contract), and bad, unknown or missing params refused naming them.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/prefill/prefill_contract.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

using namespace generator_test;

Params Prefill(const char* dtype, const char* head_dim, const char* group, const char* causal) {
  return {{"dtype", dtype}, {"head_dim", head_dim}, {"group", group}, {"causal", causal}};
}

TEST_CASE("batch_prefill URIs name the dtype, head dim, group, mask, features and tile", "[prefill]") {
  CHECK(MustGenerate("batch_prefill_ragged", Prefill("bf16", "128", "4", "1")).uri ==
        "batch_prefill_ragged_bf16_d128_g4_causal_t128x128");
  Params paged = Prefill("fp16", "256", "1", "0");
  paged["page_size"] = "16";
  paged["soft_cap"] = "1";
  CHECK(MustGenerate("batch_prefill_paged", paged).uri == "batch_prefill_paged_fp16_d256_g1_p16_t64x32_softcap");

  // soft_cap=0 given or omitted, and zero-padded numbers, are one specialization.
  const JitSpec omitted = MustGenerate("batch_prefill_ragged", Prefill("bf16", "128", "4", "1"));
  Params given = Prefill("bf16", "0128", "04", "1");
  given["soft_cap"] = "0";
  const JitSpec spelled = MustGenerate("batch_prefill_ragged", given);
  CHECK(spelled.uri == omitted.uri);
  CHECK(spelled.headers[0].content == omitted.headers[0].content);
  CHECK(omitted.params == Params{{"dtype", "bf16"},
                                 {"head_dim", "128"},
                                 {"group", "4"},
                                 {"causal", "1"},
                                 {"soft_cap", "0"},
                                 {"tile_rows", "128"}});
  // tile_rows auto is the head_dim's default spelled out: one specialization.
  Params auto_tile = Prefill("bf16", "128", "4", "1");
  auto_tile["tile_rows"] = "auto";
  CHECK(MustGenerate("batch_prefill_ragged", auto_tile).uri == omitted.uri);
  auto_tile["tile_rows"] = "128";
  CHECK(MustGenerate("batch_prefill_ragged", auto_tile).uri == omitted.uri);
  // 64-row tiles at head_dim 128: the mma.sync kernel, named by its tile.
  auto_tile["tile_rows"] = "64";
  const JitSpec mma = MustGenerate("batch_prefill_ragged", auto_tile);
  CHECK(mma.uri == "batch_prefill_ragged_bf16_d128_g4_causal_t64x64");
  CHECK(mma.params.at("tile_rows") == "64");
  CHECK(Contains(mma.headers[0].content, "#define KILN_PREFILL_TILE_ROWS 64"));

  std::set<std::string> uris;
  size_t specs = 0;
  for (const char* op : {"batch_prefill_ragged", "batch_prefill_paged"})
    for (const char* dtype : {"fp16", "bf16"})
      for (const char* head_dim : {"64", "128", "256"})
        for (const char* group : {"1", "2", "4", "8"})
          for (const char* causal : {"0", "1"})
            for (const char* soft_cap : {"0", "1"})
              for (const char* tile_rows : {"64", "128"}) {
                if (std::string(head_dim) == "256" && std::string(tile_rows) == "128") continue;
                Params params = Prefill(dtype, head_dim, group, causal);
                params["soft_cap"] = soft_cap;
                params["tile_rows"] = tile_rows;
                if (std::string(op) == "batch_prefill_paged") params["page_size"] = "64";
                uris.insert(MustGenerate(op, params).uri);
                ++specs;
              }
  CHECK(uris.size() == specs);
}

TEST_CASE("a batch_prefill spec names its unit, entries, sm_90a and the contract's launch shape", "[prefill]") {
  Params params = Prefill("bf16", "256", "8", "1");
  params["page_size"] = "1";
  const JitSpec spec = MustGenerate("batch_prefill_paged", params);
  REQUIRE(spec.units.size() == 1);
  CHECK(spec.units[0].tree_path == "src/prefill/batch_prefill.cu");
  CHECK(spec.entries == std::vector<std::string>{"kiln_batch_prefill", "kiln_batch_prefill_merge"});
  REQUIRE(spec.arch_families.size() == 1);
  CHECK(spec.arch_families[0].name == "sm_90a");
  REQUIRE(spec.launch.size() == 2);
  CHECK(spec.launch[0].block == prefill::kThreads);  // head_dim 256: the mma.sync kernel
  CHECK(spec.launch[0].dynamic_smem == prefill::MmaSmemBytes(256));
  CHECK(spec.launch[0].items_per_block == prefill::kTileRows);
  // head_dim 64 and 128: the Hopper kernel, 384 threads and 128-row tiles.
  const JitSpec sm90 = MustGenerate("batch_prefill_ragged", Prefill("bf16", "128", "4", "1"));
  CHECK(sm90.launch[0].block == prefill::kSm90Threads);
  CHECK(sm90.launch[0].dynamic_smem == prefill::Sm90SmemBytes(128));
  CHECK(sm90.launch[0].dynamic_smem == 1024 + (128 + 2 * 2 * 128) * 128 * 2 + 256 + 2 * 128 * 4);
  CHECK(sm90.launch[0].items_per_block == 128);
  CHECK(Contains(sm90.headers[0].content, "#define KILN_PREFILL_TILE_ROWS 128"));
  // tile_rows 64 at head_dim 128: the mma.sync kernel's launch.
  Params short_rows = Prefill("bf16", "128", "4", "1");
  short_rows["tile_rows"] = "64";
  const JitSpec mma = MustGenerate("batch_prefill_ragged", short_rows);
  CHECK(mma.launch[0].block == prefill::kThreads);
  CHECK(mma.launch[0].dynamic_smem == prefill::MmaSmemBytes(128));
  CHECK(mma.launch[0].items_per_block == 64);
  CHECK(spec.launch[1].block == prefill::kMergeThreads);
  CHECK(spec.launch[1].items_per_block == prefill::kMergePositions);
  CHECK(Contains(spec.headers[0].content, "#define KILN_PREFILL_PAGED 1"));
  CHECK(Contains(spec.headers[0].content, "#define KILN_PREFILL_PAGE_SIZE 1"));
  CHECK(Contains(spec.headers[0].content, "#define KILN_PREFILL_CAUSAL 1"));
  const JitSpec ragged = MustGenerate("batch_prefill_ragged", Prefill("fp16", "64", "2", "0"));
  CHECK(Contains(ragged.headers[0].content, "#define KILN_PREFILL_PAGED 0"));
  CHECK(Contains(ragged.headers[0].content, "#define KILN_PREFILL_T __half"));
}

TEST_CASE("batch_prefill refuses what its kernels do not support, naming the param", "[prefill]") {
  auto refused = [](const std::string& op, const Params& params, const std::string& fragment) {
    auto spec = Generate(op, params);
    INFO(op << ": " << spec.status().ToString());
    REQUIRE(!spec.ok());
    CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(spec.status().message(), fragment));
  };
  refused("batch_prefill_ragged", Prefill("bf16", "96", "4", "1"), "head_dim");
  refused("batch_prefill_ragged", Prefill("fp32", "128", "4", "1"), "dtype");
  refused("batch_prefill_ragged", Prefill("bf16", "128", "3", "1"), "group");
  refused("batch_prefill_ragged", Prefill("bf16", "128", "4", "2"), "causal");
  refused("batch_prefill_ragged", {{"dtype", "bf16"}, {"head_dim", "128"}, {"group", "4"}}, "causal");
  Params paged = Prefill("bf16", "128", "4", "1");
  refused("batch_prefill_paged", paged, "page_size");
  paged["page_size"] = "24";
  refused("batch_prefill_paged", paged, "page_size");
  Params tile = Prefill("bf16", "256", "4", "1");
  tile["tile_rows"] = "128";
  refused("batch_prefill_ragged", tile, "param 'tile_rows' = '128' is not allowed for head_dim 256");
  tile["tile_rows"] = "96";
  refused("batch_prefill_ragged", tile, "tile_rows");
  Params ragged_with_page = Prefill("bf16", "128", "4", "1");
  ragged_with_page["page_size"] = "16";
  refused("batch_prefill_ragged", ragged_with_page, "page_size");
}

}  // namespace
}  // namespace kiln::kernels
