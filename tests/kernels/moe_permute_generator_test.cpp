// The moe_permute generator (kernels/ops/moe/moe_permute_generator.cpp): its registry entry and
// param, canonical readable URIs, the config it renders, the five launch hints the contract
// states, and every bad or missing param refused by name.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "kernels/jit/op_generator.h"
#include "kiln/moe/moe_contract.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

using namespace generator_test;

TEST_CASE("the builtin registry serves moe_permute with the param max_experts", "[moe]") {
  const OpGenerator* op = OpRegistry::Builtin().Find("moe_permute");
  REQUIRE(op != nullptr);
  CHECK(op->family() == "moe");
  CHECK(!op->description().empty());
  REQUIRE(op->params().size() == 1);
  CHECK(op->params()[0].name == "max_experts");
  CHECK(op->params()[0].required());
  CHECK(!op->params()[0].help.empty());
}

TEST_CASE("moe_permute URIs are readable and one per max_experts", "[moe]") {
  const JitSpec spec = MustGenerate("moe_permute", {{"max_experts", "256"}});
  CHECK(spec.uri == "moe_permute_e256");
  CHECK(spec.params == Params{{"max_experts", "256"}});
  REQUIRE(spec.headers.size() == 1);
  CHECK(Contains(spec.headers[0].content, "#define KILN_MOE_PERMUTE_MAX_EXPERTS 256"));
  CHECK(spec.entries == std::vector<std::string>{"kiln_moe_permute", "kiln_moe_permute_gather",
                                                 "kiln_moe_permute_count", "kiln_moe_permute_rank",
                                                 "kiln_moe_permute_invert"});
  REQUIRE(spec.launch.size() == 5);
  CHECK(spec.launch[0].entry == moe::kMoePermuteEntry);
  CHECK(spec.launch[0].block == 1024);
  CHECK(spec.launch[0].items_per_block == 0);  // one block, whatever T
  CHECK(spec.launch[0].dynamic_smem == 0);
  CHECK(spec.launch[1].entry == moe::kMoePermuteGatherEntry);
  CHECK(spec.launch[1].block == moe::kGatherBlock);
  CHECK(spec.launch[1].items_per_block == moe::kGatherWarps);
  CHECK(spec.launch[1].dynamic_smem == 0);
  // The multi-block permutation: a chunk per block of the single block's size, then a thread per row.
  for (size_t i : {2, 3}) {
    CHECK(spec.launch[i].block == moe::kPermuteBlock);
    CHECK(spec.launch[i].items_per_block == 0);
    CHECK(spec.launch[i].dynamic_smem == 0);
  }
  CHECK(spec.launch[2].entry == moe::kMoePermuteCountEntry);
  CHECK(spec.launch[3].entry == moe::kMoePermuteRankEntry);
  CHECK(spec.launch[4].entry == moe::kMoePermuteInvertEntry);
  CHECK(spec.launch[4].block == moe::kInvertBlock);
  CHECK(spec.launch[4].items_per_block == moe::kInvertBlock);
  CHECK(spec.launch[4].dynamic_smem == 0);

  std::set<std::string> uris;
  for (const char* max_experts : {"32", "64", "128", "256"})
    uris.insert(MustGenerate("moe_permute", {{"max_experts", max_experts}}).uri);
  CHECK(uris == std::set<std::string>{"moe_permute_e32", "moe_permute_e64", "moe_permute_e128", "moe_permute_e256"});
}

TEST_CASE("moe_permute refuses a bad, unknown or missing param by name", "[moe]") {
  const Params good = {{"max_experts", "128"}};
  auto refused = [&](Params params, const std::string& key, const char* value, std::string_view part) {
    if (value == nullptr) params.erase(key);
    else params[key] = value;
    const auto spec = Generate("moe_permute", params);
    INFO(key << " = " << (value ? value : "(missing)") << ": " << spec.status().ToString());
    REQUIRE(!spec.ok());
    CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(spec.status().message(), part));
  };
  refused(good, "max_experts", "512", "max_experts");
  refused(good, "max_experts", "16", "max_experts");
  refused(good, "max_experts", nullptr, "max_experts");
  refused(good, "dtype", "bf16", "dtype");
  refused(good, "align", "64", "align");
}

TEST_CASE("moe_permute's row bound is T * top_k plus E * (align - 1) when padding", "[moe]") {
  STATIC_REQUIRE(moe::MoePermuteRows(4096, 8, 256, 1) == 32768);
  STATIC_REQUIRE(moe::MoePermuteRows(4096, 8, 256, 128) == 32768 + 256 * 127);
  STATIC_REQUIRE(moe::MoePermuteRows(0, 8, 256, 64) == 256 * 63);
  STATIC_REQUIRE(moe::MoePermuteRows(0, 2, 8, 1) == 0);
}

}  // namespace
}  // namespace kiln::kernels
