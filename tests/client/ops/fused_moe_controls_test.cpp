// fused_moe's process controls without a GPU: KILN_FUSED_MOE_PATH (auto, gemv, grouped),
// KILN_FUSED_MOE_PDL (1, 0), KILN_FUSED_MOE_FOLD (0, 1), KILN_FUSED_MOE_ONE_GRID (0, 1),
// KILN_FUSED_MOE_DOWN_COLUMN_GROUPS (auto, 1, 2) and
// fused_moe_fp8's KILN_FUSED_MOE_FP8_PREFETCH (auto, 1..8), KILN_FUSED_MOE_FP8_K_PARTS (auto, 2, 4, 8) and
// KILN_FUSED_MOE_FP8_SILU_EPILOGUE (1, 0), and both layers' KILN_FUSED_MOE_GATHER (1, 0) read once
// per process, said once on stderr when they change the default, a bad value reported and the default used; the
// testing overrides on top of them. This binary is run again as a child with the variables set (the environment is
// read once per process).
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "client/ops/moe/fused_moe_fp8_plan.h"
#include "client/ops/moe/fused_moe_plan.h"
#include "tests/support/subprocess.h"

namespace {

using kiln::client::FusedMoePath;

const char* PathText(FusedMoePath path) {
  switch (path) {
    case FusedMoePath::kGemv: return "gemv";
    case FusedMoePath::kGrouped: return "grouped";
    default: return "auto";
  }
}

// Run only as the child of the tests below ([.] keeps it out of a plain run): what the process's
// variables make of the controls, then the testing overrides on top of them.
TEST_CASE("child: fused_moe's controls", "[.fused-moe-controls-child]") {
  std::printf("path: %s\n", PathText(kiln::client::FusedMoePathInUse()));
  std::printf("fp8 prefetch: %d\n", kiln::client::FusedMoeFp8PrefetchBlocks());
  kiln::client::SetFusedMoeFp8PrefetchBlocksForTesting(3);
  std::printf("fp8 prefetch forced: %d\n", kiln::client::FusedMoeFp8PrefetchBlocks());
  kiln::client::SetFusedMoeFp8PrefetchBlocksForTesting(-1);
  std::printf("fp8 prefetch back: %d\n", kiln::client::FusedMoeFp8PrefetchBlocks());
  // Mixtral-8x7B's down GEMV at one token (4096 rows x 2 experts, the rule: 4) and Qwen3-30B-A3B's
  // gate-up (1536 x 8: 2), on 132 SMs.
  std::printf("fp8 k parts: %d %d\n", kiln::client::FusedMoeFp8GemvKPartsFor(4096, 2, 132),
              kiln::client::FusedMoeFp8GemvKPartsFor(1536, 8, 132));
  kiln::client::SetFusedMoeFp8GemvKPartsForTesting(8);
  std::printf("fp8 k parts forced: %d\n", kiln::client::FusedMoeFp8GemvKPartsFor(1536, 8, 132));
  kiln::client::SetFusedMoeFp8GemvKPartsForTesting(0);
  std::printf("fp8 silu epilogue: %d\n", kiln::client::FusedMoeFp8SiluEpilogue() ? 1 : 0);
  kiln::client::SetFusedMoeFp8SiluEpilogueForTesting(kiln::client::FusedMoeFp8SiluEpilogue() ? 0 : 1);
  std::printf("fp8 silu epilogue flipped: %d\n", kiln::client::FusedMoeFp8SiluEpilogue() ? 1 : 0);
  kiln::client::SetFusedMoeFp8SiluEpilogueForTesting(-1);
  std::printf("fp8 silu epilogue back: %d\n", kiln::client::FusedMoeFp8SiluEpilogue() ? 1 : 0);
  // Qwen3-30B-A3B's I 768 (the rule gathers) and Mixtral-8x7B's 14336 (it copies).
  const auto gather = [] {
    return std::to_string(kiln::client::FusedMoeGatherX(768) ? 1 : 0) + " " +
           std::to_string(kiln::client::FusedMoeGatherX(14336) ? 1 : 0);
  };
  std::printf("gather: %s\n", gather().c_str());
  for (int forced : {0, 1, 2}) {
    kiln::client::SetFusedMoeGatherXForTesting(forced);
    std::printf("gather forced %d: %s\n", forced, gather().c_str());
  }
  kiln::client::SetFusedMoeGatherXForTesting(-1);
  std::printf("gather back: %s\n", gather().c_str());
  std::printf("pdl: %d\n", kiln::client::FusedMoeProgrammaticLaunch() ? 1 : 0);
  std::printf("fold: %d\n", kiln::client::FusedMoeFoldedCombine() ? 1 : 0);
  kiln::client::SetFusedMoeFoldedCombineForTesting(kiln::client::FusedMoeFoldedCombine() ? 0 : 1);
  std::printf("fold flipped: %d\n", kiln::client::FusedMoeFoldedCombine() ? 1 : 0);
  kiln::client::SetFusedMoeFoldedCombineForTesting(-1);
  std::printf("fold back: %d\n", kiln::client::FusedMoeFoldedCombine() ? 1 : 0);
  std::printf("one grid: %d\n", kiln::client::FusedMoeOneGrid() ? 1 : 0);
  kiln::client::SetFusedMoeOneGridForTesting(kiln::client::FusedMoeOneGrid() ? 0 : 1);
  std::printf("one grid flipped: %d\n", kiln::client::FusedMoeOneGrid() ? 1 : 0);
  kiln::client::SetFusedMoeOneGridForTesting(-1);
  std::printf("one grid back: %d\n", kiln::client::FusedMoeOneGrid() ? 1 : 0);
  // Qwen3-30B-A3B at one token (8 experts) and DeepSeek-V3 at 64 (256).
  std::printf("one grid lag: %d %d\n", kiln::client::FusedMoeOneGridLagFor(8),
              kiln::client::FusedMoeOneGridLagFor(256));
  kiln::client::SetFusedMoeOneGridLagForTesting(3);
  std::printf("one grid lag forced: %d %d\n", kiln::client::FusedMoeOneGridLagFor(8),
              kiln::client::FusedMoeOneGridLagFor(2));
  kiln::client::SetFusedMoeOneGridLagForTesting(0);
  // Qwen3-30B-A3B at one token on 132 SMs (the rule: 2) and Mixtral at one (128 column blocks x 2: 1).
  std::printf("groups: %d %d\n", kiln::client::FusedMoeDownColumnGroupsFor(64, 8, 132),
              kiln::client::FusedMoeDownColumnGroupsFor(128, 2, 132));
  kiln::client::SetFusedMoeDownColumnGroupsForTesting(2);
  std::printf("groups forced: %d\n", kiln::client::FusedMoeDownColumnGroupsFor(128, 2, 132));
  kiln::client::SetFusedMoeDownColumnGroupsForTesting(0);
  kiln::client::SetFusedMoePathForTesting(static_cast<int>(FusedMoePath::kGrouped));
  kiln::client::SetFusedMoeProgrammaticLaunchForTesting(0);
  std::printf("forced: %s %d\n", PathText(kiln::client::FusedMoePathInUse()),
              kiln::client::FusedMoeProgrammaticLaunch() ? 1 : 0);
  kiln::client::SetFusedMoePathForTesting(-1);
  kiln::client::SetFusedMoeProgrammaticLaunchForTesting(-1);
  std::printf("back: %s %d\n", PathText(kiln::client::FusedMoePathInUse()),
              kiln::client::FusedMoeProgrammaticLaunch() ? 1 : 0);
}

struct Case {
  const char* path;  // KILN_FUSED_MOE_PATH, null: unset
  const char* pdl;   // KILN_FUSED_MOE_PDL, null: unset
  const char* want_path;
  int want_pdl;
  const char* said;            // on stderr, or null for nothing about any variable
  const char* fold = nullptr;  // KILN_FUSED_MOE_FOLD, null: unset
  int want_fold = 0;
  const char* groups = nullptr;  // KILN_FUSED_MOE_DOWN_COLUMN_GROUPS, null: unset
  const char* want_groups = "2 1";
  const char* prefetch = nullptr;  // KILN_FUSED_MOE_FP8_PREFETCH, null: unset
  int want_prefetch = 0;
  const char* k_parts = nullptr;  // KILN_FUSED_MOE_FP8_K_PARTS, null: unset
  const char* want_k_parts = "4 2";
  const char* silu = nullptr;  // KILN_FUSED_MOE_FP8_SILU_EPILOGUE, null: unset
  int want_silu = 1;
  const char* gather = nullptr;  // KILN_FUSED_MOE_GATHER, null: unset
  const char* want_gather = "1 0";
  const char* one_grid = nullptr;  // KILN_FUSED_MOE_ONE_GRID, null: unset
  int want_one_grid = 0;
  const char* lag = nullptr;  // KILN_FUSED_MOE_ONE_GRID_LAG, null: unset
  const char* want_lag = "0 0";
};

void RunChild(const Case& c) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  INFO("KILN_FUSED_MOE_PATH=" << (c.path ? c.path : "(unset)")
                              << " KILN_FUSED_MOE_PDL=" << (c.pdl ? c.pdl : "(unset)"));
  kiln::testing::SubprocessOptions options;
  options.argv = {self, "child: fused_moe's controls"};
  if (c.path != nullptr) options.set_env["KILN_FUSED_MOE_PATH"] = c.path;
  else options.unset_env.push_back("KILN_FUSED_MOE_PATH");
  if (c.pdl != nullptr) options.set_env["KILN_FUSED_MOE_PDL"] = c.pdl;
  else options.unset_env.push_back("KILN_FUSED_MOE_PDL");
  if (c.fold != nullptr) options.set_env["KILN_FUSED_MOE_FOLD"] = c.fold;
  else options.unset_env.push_back("KILN_FUSED_MOE_FOLD");
  if (c.groups != nullptr) options.set_env["KILN_FUSED_MOE_DOWN_COLUMN_GROUPS"] = c.groups;
  else options.unset_env.push_back("KILN_FUSED_MOE_DOWN_COLUMN_GROUPS");
  if (c.prefetch != nullptr) options.set_env["KILN_FUSED_MOE_FP8_PREFETCH"] = c.prefetch;
  else options.unset_env.push_back("KILN_FUSED_MOE_FP8_PREFETCH");
  if (c.k_parts != nullptr) options.set_env["KILN_FUSED_MOE_FP8_K_PARTS"] = c.k_parts;
  else options.unset_env.push_back("KILN_FUSED_MOE_FP8_K_PARTS");
  if (c.silu != nullptr) options.set_env["KILN_FUSED_MOE_FP8_SILU_EPILOGUE"] = c.silu;
  else options.unset_env.push_back("KILN_FUSED_MOE_FP8_SILU_EPILOGUE");
  if (c.gather != nullptr) options.set_env["KILN_FUSED_MOE_GATHER"] = c.gather;
  else options.unset_env.push_back("KILN_FUSED_MOE_GATHER");
  if (c.one_grid != nullptr) options.set_env["KILN_FUSED_MOE_ONE_GRID"] = c.one_grid;
  else options.unset_env.push_back("KILN_FUSED_MOE_ONE_GRID");
  if (c.lag != nullptr) options.set_env["KILN_FUSED_MOE_ONE_GRID_LAG"] = c.lag;
  else options.unset_env.push_back("KILN_FUSED_MOE_ONE_GRID_LAG");
  kiln::testing::Subprocess child(options);
  REQUIRE(child.Wait() == 0);
  const std::string out = child.Output();
  INFO(out);
  CHECK(out.find(std::string("path: ") + c.want_path + "\n") != std::string::npos);
  CHECK(out.find("pdl: " + std::to_string(c.want_pdl)) != std::string::npos);
  CHECK(out.find("forced: grouped 0") != std::string::npos);
  CHECK(out.find(std::string("back: ") + c.want_path + " " + std::to_string(c.want_pdl)) != std::string::npos);
  CHECK(out.find("fold: " + std::to_string(c.want_fold) + "\n") != std::string::npos);
  CHECK(out.find("fold flipped: " + std::to_string(1 - c.want_fold) + "\n") != std::string::npos);
  CHECK(out.find("fold back: " + std::to_string(c.want_fold) + "\n") != std::string::npos);
  CHECK(out.find("one grid: " + std::to_string(c.want_one_grid) + "\n") != std::string::npos);
  CHECK(out.find("one grid flipped: " + std::to_string(1 - c.want_one_grid) + "\n") != std::string::npos);
  CHECK(out.find("one grid back: " + std::to_string(c.want_one_grid) + "\n") != std::string::npos);
  CHECK(out.find(std::string("one grid lag: ") + c.want_lag + "\n") != std::string::npos);
  CHECK(out.find("one grid lag forced: 3 2\n") != std::string::npos);
  CHECK(out.find(std::string("groups: ") + c.want_groups + "\n") != std::string::npos);
  CHECK(out.find("groups forced: 2\n") != std::string::npos);
  CHECK(out.find("fp8 prefetch: " + std::to_string(c.want_prefetch) + "\n") != std::string::npos);
  CHECK(out.find("fp8 prefetch forced: 3\n") != std::string::npos);
  CHECK(out.find("fp8 prefetch back: " + std::to_string(c.want_prefetch) + "\n") != std::string::npos);
  CHECK(out.find(std::string("fp8 k parts: ") + c.want_k_parts + "\n") != std::string::npos);
  CHECK(out.find("fp8 k parts forced: 8\n") != std::string::npos);
  CHECK(out.find("fp8 silu epilogue: " + std::to_string(c.want_silu) + "\n") != std::string::npos);
  CHECK(out.find("fp8 silu epilogue flipped: " + std::to_string(1 - c.want_silu) + "\n") != std::string::npos);
  CHECK(out.find("fp8 silu epilogue back: " + std::to_string(c.want_silu) + "\n") != std::string::npos);
  CHECK(out.find(std::string("gather: ") + c.want_gather + "\n") != std::string::npos);
  CHECK(out.find("gather forced 0: 0 0\n") != std::string::npos);
  CHECK(out.find("gather forced 1: 1 1\n") != std::string::npos);
  CHECK(out.find("gather forced 2: 1 0\n") != std::string::npos);
  CHECK(out.find(std::string("gather back: ") + c.want_gather + "\n") != std::string::npos);
  if (c.said != nullptr) CHECK(out.find(c.said) != std::string::npos);
  else CHECK(out.find("KILN_FUSED_MOE") == std::string::npos);
}

TEST_CASE("KILN_FUSED_MOE_PATH: auto by default, gemv or grouped forces a path and says so, a bad value is reported",
          "[client][ops][moe]") {
  const Case cases[] = {
      {nullptr, nullptr, "auto", 1, nullptr},
      {"auto", nullptr, "auto", 1, nullptr},
      {"gemv", nullptr, "gemv", 1,
       "kiln: KILN_FUSED_MOE_PATH=gemv: fused_moe and fused_moe_fp8 run their decode (GEMV) path wherever they can "
       "in this process"},
      {"grouped", nullptr, "grouped", 1,
       "kiln: KILN_FUSED_MOE_PATH=grouped: fused_moe and fused_moe_fp8 run their grouped path"},
      {"GEMV", nullptr, "auto", 1,
       "kiln: KILN_FUSED_MOE_PATH='GEMV' is not valid: expected auto, gemv or grouped; auto is used"},
  };
  for (const Case& c : cases) RunChild(c);
}

TEST_CASE("KILN_FUSED_MOE_PDL: on by default, 0 turns it off and says so, a bad value is reported",
          "[client][ops][moe]") {
  const Case cases[] = {
      {nullptr, "1", "auto", 1, nullptr},
      {nullptr, "0", "auto", 0,
       "kiln: KILN_FUSED_MOE_PDL=0: fused_moe's and fused_moe_fp8's decode paths launch in plain stream order in "
       "this process"},
      {nullptr, "on", "auto", 1,
       "kiln: KILN_FUSED_MOE_PDL='on' is not valid: expected 0 or 1; the default (1) is used"},
  };
  for (const Case& c : cases) RunChild(c);
}

TEST_CASE("KILN_FUSED_MOE_FOLD: off by default, 1 folds the combine and says so, a bad value is reported",
          "[client][ops][moe]") {
  const Case cases[] = {
      {nullptr, nullptr, "auto", 1, nullptr, "0", 0},
      {nullptr, nullptr, "auto", 1,
       "kiln: KILN_FUSED_MOE_FOLD=1: fused_moe's decode path folds the combine into its down GEMV in this process", "1",
       1},
      {nullptr, nullptr, "auto", 1,
       "kiln: KILN_FUSED_MOE_FOLD='yes' is not valid: expected 0 or 1; the default (0) is used", "yes", 0},
  };
  for (const Case& c : cases) RunChild(c);
}

TEST_CASE("KILN_FUSED_MOE_ONE_GRID: off by default, 1 runs the two GEMVs in one grid and says so, a bad value is "
          "reported",
          "[client][ops][moe]") {
  Case off{nullptr, nullptr, "auto", 1, nullptr};
  off.one_grid = "0";
  Case on{nullptr, nullptr, "auto", 1,
          "kiln: KILN_FUSED_MOE_ONE_GRID=1: fused_moe's decode path runs its two GEMVs in one grid in this process"};
  on.one_grid = "1";
  on.want_one_grid = 1;
  Case bad{nullptr, nullptr, "auto", 1,
           "kiln: KILN_FUSED_MOE_ONE_GRID='2' is not valid: expected 0 or 1; the default (0) is used"};
  bad.one_grid = "2";
  for (const Case& c : {off, on, bad}) RunChild(c);
}

TEST_CASE("KILN_FUSED_MOE_ONE_GRID_LAG: none by default, 1 to 256 (capped at the chosen experts) and says so, a bad "
          "value is reported",
          "[client][ops][moe]") {
  Case two{nullptr, nullptr, "auto", 1,
           "kiln: KILN_FUSED_MOE_ONE_GRID_LAG=2: fused_moe's one grid runs an expert's down blocks 2 experts' gate-up "
           "blocks later in this process"};
  two.lag = "2";
  two.want_lag = "2 2";
  Case all{nullptr, nullptr, "auto", 1, "KILN_FUSED_MOE_ONE_GRID_LAG=256"};
  all.lag = "256";
  all.want_lag = "8 256";
  Case bad{nullptr, nullptr, "auto", 1,
           "kiln: KILN_FUSED_MOE_ONE_GRID_LAG='257' is not valid: expected auto or 1 to 256; auto is used"};
  bad.lag = "257";
  for (const Case& c : {two, all, bad}) RunChild(c);
}

TEST_CASE("KILN_FUSED_MOE_DOWN_COLUMN_GROUPS: the rule by default, 1 or 2 forces the folded down GEMV's groups and "
          "says so, a bad value is reported",
          "[client][ops][moe]") {
  const Case cases[] = {
      {nullptr, nullptr, "auto", 1, nullptr, nullptr, 0, "auto", "2 1"},
      {nullptr, nullptr, "auto", 1,
       "kiln: KILN_FUSED_MOE_DOWN_COLUMN_GROUPS=1: fused_moe's folded down GEMV takes 1 column group(s) a block",
       nullptr, 0, "1", "1 1"},
      {nullptr, nullptr, "auto", 1, "KILN_FUSED_MOE_DOWN_COLUMN_GROUPS=2", nullptr, 0, "2", "2 2"},
      {nullptr, nullptr, "auto", 1,
       "kiln: KILN_FUSED_MOE_DOWN_COLUMN_GROUPS='3' is not valid: expected auto or 1 to 2; auto is used", nullptr, 0,
       "3", "2 1"},
  };
  for (const Case& c : cases) RunChild(c);
}

TEST_CASE("KILN_FUSED_MOE_FP8_PREFETCH: none by default, 1 to 8 asks L2 that many k blocks ahead and says so, a bad "
          "value is reported",
          "[client][ops][moe]") {
  const Case cases[] = {
      {nullptr, nullptr, "auto", 1, nullptr, nullptr, 0, nullptr, "2 1", "auto", 0},
      {nullptr, nullptr, "auto", 1,
       "kiln: KILN_FUSED_MOE_FP8_PREFETCH=4: fused_moe_fp8's decode GEMVs ask L2 for their weight rows 4 k block(s) "
       "ahead in this process",
       nullptr, 0, nullptr, "2 1", "4", 4},
      {nullptr, nullptr, "auto", 1,
       "kiln: KILN_FUSED_MOE_FP8_PREFETCH='9' is not valid: expected auto or 1 to 8; auto is used", nullptr, 0, nullptr,
       "2 1", "9", 0},
  };
  for (const Case& c : cases) RunChild(c);
}

TEST_CASE("KILN_FUSED_MOE_FP8_K_PARTS: the rule's by default, 2, 4 or 8 forces the decode GEMVs' k parts and says so, "
          "a bad value is reported",
          "[client][ops][moe]") {
  Case forced = {nullptr, nullptr, "auto", 1,
                 "kiln: KILN_FUSED_MOE_FP8_K_PARTS=2: fused_moe_fp8's decode GEMVs split each row group's k blocks "
                 "over 2 warps in this process"};
  forced.k_parts = "2";
  forced.want_k_parts = "2 2";
  Case auto_parts = {nullptr, nullptr, "auto", 1, nullptr};
  auto_parts.k_parts = "auto";
  Case bad = {nullptr, nullptr, "auto", 1,
              "kiln: KILN_FUSED_MOE_FP8_K_PARTS='6' is not valid: expected auto, 2, 4 or 8; auto is used"};
  bad.k_parts = "6";
  Case too_many = {nullptr, nullptr, "auto", 1,
                   "kiln: KILN_FUSED_MOE_FP8_K_PARTS='16' is not valid: expected auto, 2, 4 or 8; auto is used"};
  too_many.k_parts = "16";
  for (const Case& c : {forced, auto_parts, bad, too_many}) RunChild(c);
}

}  // namespace

TEST_CASE("KILN_FUSED_MOE_FP8_SILU_EPILOGUE: on by default, 0 quantizes silu(gate) * up in a kernel of its own and "
          "says so, a bad value is reported",
          "[client][ops][moe]") {
  Case on = {nullptr, nullptr, "auto", 1, nullptr};
  on.silu = "1";
  Case off = {nullptr, nullptr, "auto", 1,
              "kiln: KILN_FUSED_MOE_FP8_SILU_EPILOGUE=0: fused_moe_fp8's grouped path quantizes silu(gate) * up in a "
              "kernel of its own after the gate-and-up GEMM in this process"};
  off.silu = "0";
  off.want_silu = 0;
  Case bad = {nullptr, nullptr, "auto", 1,
              "kiln: KILN_FUSED_MOE_FP8_SILU_EPILOGUE='no' is not valid: expected 0 or 1; the default (1) is used"};
  bad.silu = "no";
  for (const Case& c : {on, off, bad}) RunChild(c);
}

TEST_CASE("KILN_FUSED_MOE_GATHER: the rule by default (auto), 0 never and 1 always gather and say so, a bad value is "
          "reported",
          "[client][ops][moe]") {
  Case automatic = {nullptr, nullptr, "auto", 1, nullptr};
  automatic.gather = "auto";
  Case never = {nullptr, nullptr, "auto", 1,
                "kiln: KILN_FUSED_MOE_GATHER=0: fused_moe's and fused_moe_fp8's grouped paths copy x's rows (fp8: "
                "their codes) into the grouped layout for the gate-and-up GEMM in this process"};
  never.gather = "0";
  never.want_gather = "0 0";
  Case always = {nullptr, nullptr, "auto", 1,
                 "kiln: KILN_FUSED_MOE_GATHER=1: fused_moe's and fused_moe_fp8's gate-and-up GEMMs gather x's rows "
                 "wherever they can in this process, whatever I"};
  always.gather = "1";
  always.want_gather = "1 1";
  Case bad = {nullptr, nullptr, "auto", 1,
              "kiln: KILN_FUSED_MOE_GATHER='2' is not valid: expected auto, 0 or 1; auto is used"};
  bad.gather = "2";
  for (const Case& c : {automatic, never, always, bad}) RunChild(c);
}
