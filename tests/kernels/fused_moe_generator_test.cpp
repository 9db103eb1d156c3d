// The fused_moe generator (kernels/ops/moe/fused_moe_generator.cpp): its registry entry and
// param, readable URIs (one per dtype), the config it renders, the launch hints the contract
// states, the contract's expert-block rule, and every bad or missing param refused by name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/jit/op_generator.h"
#include "kiln/moe/moe_contract.h"
#include "tests/kernels/generator_fixture.h"

namespace kiln::kernels {
namespace {

using namespace generator_test;

TEST_CASE("the builtin registry serves fused_moe with the param dtype", "[moe]") {
  const OpGenerator* op = OpRegistry::Builtin().Find("fused_moe");
  REQUIRE(op != nullptr);
  CHECK(op->family() == "moe");
  CHECK(!op->description().empty());
  REQUIRE(op->params().size() == 1);
  CHECK(op->params()[0].name == "dtype");
  CHECK(op->params()[0].required());
  CHECK(op->params()[0].choices == std::vector<std::string>{"fp16", "bf16"});
}

TEST_CASE("fused_moe URIs are readable and one per dtype, with both GEMVs, their folded and one-grid forms and their "
          "hints",
          "[moe]") {
  const JitSpec spec = MustGenerate("fused_moe", {{"dtype", "bf16"}});
  CHECK(spec.uri == "fused_moe_bf16");
  CHECK(spec.params == Params{{"dtype", "bf16"}});
  REQUIRE(spec.headers.size() == 1);
  CHECK(Contains(spec.headers[0].content, "#define KILN_FUSED_MOE_T __nv_bfloat16"));
  CHECK(spec.entries == std::vector<std::string>{"kiln_fused_moe_gate_up", "kiln_fused_moe_down",
                                                 "kiln_fused_moe_gate_up_folded", "kiln_fused_moe_down_folded",
                                                 "kiln_fused_moe_one_grid_prepare", "kiln_fused_moe_one_grid"});
  REQUIRE(spec.launch.size() == 6);
  CHECK(spec.launch[0].entry == moe::kFusedMoeGateUpEntry);
  CHECK(spec.launch[0].block == moe::kGemvBlock);
  CHECK(spec.launch[0].items_per_block == moe::kGemvGateUpColumns);  // columns of act per block
  CHECK(spec.launch[1].entry == moe::kFusedMoeDownEntry);
  CHECK(spec.launch[1].block == moe::kGemvBlock);
  CHECK(spec.launch[1].items_per_block == moe::kGemvDownColumns);  // columns of y per block
  // The folded forms: the same columns (the folded down GEMV's per column group).
  CHECK(spec.launch[2].entry == moe::kFusedMoeGateUpFoldedEntry);
  CHECK(spec.launch[2].items_per_block == moe::kGemvGateUpColumns);
  CHECK(spec.launch[3].entry == moe::kFusedMoeDownFoldedEntry);
  CHECK(spec.launch[3].items_per_block == moe::kGemvDownColumns);
  // The one-grid form: a block's columns come from its ticket, so no items per block.
  CHECK(spec.launch[4].entry == moe::kFusedMoeOneGridPrepareEntry);
  CHECK(spec.launch[4].items_per_block == 0);
  CHECK(spec.launch[5].entry == moe::kFusedMoeOneGridEntry);
  CHECK(spec.launch[5].items_per_block == 0);
  for (const auto& launch : spec.launch) CHECK(launch.block == moe::kGemvBlock);
  for (const auto& launch : spec.launch) CHECK(launch.dynamic_smem == 0);

  const JitSpec fp16 = MustGenerate("fused_moe", {{"dtype", "fp16"}});
  CHECK(fp16.uri == "fused_moe_fp16");
  CHECK(Contains(fp16.headers[0].content, "#define KILN_FUSED_MOE_T __half"));
}

TEST_CASE("fused_moe refuses a bad, unknown or missing param by name", "[moe]") {
  const Params good = {{"dtype", "fp16"}};
  auto refused = [&](Params params, const std::string& key, const char* value, std::string_view part) {
    if (value == nullptr) params.erase(key);
    else params[key] = value;
    const auto spec = Generate("fused_moe", params);
    INFO(key << " = " << (value ? value : "(missing)") << ": " << spec.status().ToString());
    REQUIRE(!spec.ok());
    CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(spec.status().message(), part));
  };
  refused(good, "dtype", "fp32", "dtype");
  refused(good, "dtype", "int8", "dtype");
  refused(good, "dtype", nullptr, "dtype");
  refused(good, "hidden", "4096", "hidden");
  refused(good, "top_k", "8", "top_k");
}

TEST_CASE("fused_moe's GEMVs launch a block per expert that some slot may have chosen", "[moe]") {
  STATIC_REQUIRE(moe::FusedMoeGemvExpertBlocks(128, 8) == 8);      // Qwen3-30B-A3B, one token
  STATIC_REQUIRE(moe::FusedMoeGemvExpertBlocks(8, 16) == 8);       // Mixtral, 8 tokens
  STATIC_REQUIRE(moe::FusedMoeGemvExpertBlocks(256, 512) == 256);  // DeepSeek-V3, 64 tokens
  STATIC_REQUIRE(moe::FusedMoeGemvExpertBlocks(1, 1) == 1);
  // A warp's columns divide 8, so a multiple of 8 columns never splits a warp.
  STATIC_REQUIRE(moe::kGemvGateUpColumns % 8 == 0);
  STATIC_REQUIRE(moe::kGemvDownColumns % 8 == 0);
}

TEST_CASE("the one grid's tickets give every block of every expert once, each expert's down blocks after all of "
          "its gate-up blocks, in the order the lag says",
          "[moe]") {
  struct Shape {
    int g, d, r;
  };
  // Qwen3-30B-A3B at one token (48 gate-up, 64 down blocks, 8 experts), Mixtral at one (896, 128,
  // 2), a single expert, more down than gate-up blocks, DeepSeek-V3's widths at 256 experts.
  for (const Shape s : {Shape{48, 64, 8}, {896, 128, 2}, {3, 5, 1}, {1, 7, 4}, {128, 224, 256}}) {
    for (int lag : {0, 1, 2, s.r}) {
      if (lag > s.r) continue;  // the host caps down_lag at the chosen experts
      INFO("g " << s.g << " d " << s.d << " r " << s.r << " lag " << lag);
      const long long tickets = static_cast<long long>(s.g + s.d) * s.r;
      std::vector<int> seen(tickets, 0);
      std::vector<long long> last_gate_up(s.r, -1), first_down(s.r, tickets);
      std::vector<int> rank_order;  // the ranks whose first down ticket comes, in ticket order
      bool in_range = true;
      for (long long t = 0; t < tickets; ++t) {
        bool gate_up = false;
        int rank = -1, block_x = -1;
        moe::OneGridWork(t, s.g, s.d, s.r, lag, &gate_up, &rank, &block_x);
        if (rank < 0 || rank >= s.r || block_x < 0 || block_x >= (gate_up ? s.g : s.d)) {
          in_range = false;
          break;
        }
        ++seen[static_cast<long long>(rank) * (s.g + s.d) + (gate_up ? 0 : s.g) + block_x];
        if (gate_up) last_gate_up[rank] = t;
        else if (first_down[rank] == tickets) first_down[rank] = t;
      }
      REQUIRE(in_range);
      CHECK(std::count(seen.begin(), seen.end(), 1) == tickets);  // each block once
      for (int k = 0; k < s.r; ++k) {
        CHECK(last_gate_up[k] < first_down[k]);  // so no down block waits for one not yet taken
        // The down blocks of rank k start after the gate-up blocks of rank k + lag (or the last).
        const int after = std::min(k + lag, s.r - 1);
        CHECK(first_down[k] > last_gate_up[after]);
        if (k + lag + 1 < s.r) CHECK(first_down[k] < last_gate_up[k + lag + 1]);
      }
    }
  }
}

}  // namespace
}  // namespace kiln::kernels
