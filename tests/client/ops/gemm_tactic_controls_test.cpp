// The gemm tactic's diagnostic controls without a GPU: tactic texts, KILN_FORCE_TACTIC and
// KILN_TACTIC_BLOCKLIST parsed (every bad value refused, naming the variable, the line and what
// is accepted), the heuristic's ranking that a blocklist walks, and a process whose variables
// are bad refusing its gemm calls with that message (this binary run again as a child with the
// variables set: the environment is read once per process).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "kiln/ops/gemm.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

#include "client/ops/gemm/gemm_launch.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
#include "client/ops/gemm/gemm_tuning.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::StatusCode;
using kiln::client::GemmTacticControls;
using kiln::client::GemmTacticText;
using kiln::client::ParseGemmTactic;
using kiln::client::ParseGemmTacticControls;
using kiln::client::RankGemmTactics;

using kiln::testing::RequireInvalid;

TEST_CASE("gemm tactic texts round-trip, and only tactics of the space parse", "[client][ops][gemm]") {
  auto t = ParseGemmTactic("t128x256x64s4g8");
  REQUIRE(t.ok());
  CHECK(t->tile_m == 128);
  CHECK(t->tile_n == 256);
  CHECK(t->stages == 4);
  CHECK(t->group_m == 8);
  CHECK(t->split_k == 1);
  CHECK(GemmTacticText(*t) == "t128x256x64s4g8");
  // A split names its cluster last; its partial tile leaves fewer stages.
  auto split = ParseGemmTactic("t64x256x64s4g8k8");
  REQUIRE(split.ok());
  CHECK(split->split_k == 8);
  CHECK(GemmTacticText(*split) == "t64x256x64s4g8k8");
  RequireInvalid(ParseGemmTactic("t64x256x64s5g8k8").status(), "'t64x256x64s5g8k8' is not in the gemm tactic space");
  RequireInvalid(ParseGemmTactic("t64x256x64s4g8k3").status(), "split_k 1, 2, 4 or 8");
  RequireInvalid(ParseGemmTactic("t64x256x64s4g8k").status(), "is not a gemm tactic");
  // Multicast (gemm and fp8_gemm, not with a split) names its cluster last too.
  auto multicast = ParseGemmTactic("t128x256x64s4g8m2");
  REQUIRE(multicast.ok());
  CHECK(multicast->multicast == 2);
  CHECK(multicast->split_k == 1);
  CHECK(GemmTacticText(*multicast) == "t128x256x64s4g8m2");
  RequireInvalid(ParseGemmTactic("t64x256x64s4g8k2m2").status(), "multicast 1 or 2, not with a split");
  RequireInvalid(ParseGemmTactic("t128x256x64s4g8m4").status(), "is not in the gemm tactic space");
  RequireInvalid(ParseGemmTactic("t128x256x64s4g8m2k2").status(), "is not a gemm tactic");
  auto fp8_pair = ParseGemmTactic("t128x256x128s4g8m2", "fp8_gemm");
  REQUIRE(fp8_pair.ok());
  CHECK(fp8_pair->multicast == 2);
  RequireInvalid(ParseGemmTactic("t64x256x128s4g8k2m2", "fp8_gemm").status(), "multicast 1 or 2, not with a split");
  RequireInvalid(ParseGemmTactic("t128x256x128s4g8m2", "grouped_fp8_gemm").status(), "multicast 1;");
  RequireInvalid(ParseGemmTactic("t128x256x64s4g8m2", "grouped_gemm").status(),
                 "is not in the grouped_gemm tactic space");
  for (const char* bad : {"", "t128x256", "128x256x64s4g8", "t128x256x64s4g8 ", "t128x256x32s4g8x", "tAx256x64s4g8"})
    RequireInvalid(ParseGemmTactic(bad).status(),
                   "is not a gemm tactic; expected t<tile_m>x<tile_n>x<64, or 128 for fp8 ops>s<stages>g<group_m>");
  // Well formed but outside the space: 5 stages of 128x256 exceed shared memory; k is 64.
  RequireInvalid(ParseGemmTactic("t128x256x64s5g8").status(), "'t128x256x64s5g8' is not in the gemm tactic space");
  RequireInvalid(ParseGemmTactic("t128x256x32s4g8").status(), "is not in the gemm tactic space");
  RequireInvalid(ParseGemmTactic("t96x256x64s4g8").status(), "is not in the gemm tactic space");
  RequireInvalid(ParseGemmTactic("t128x128x64s4g17").status(), "is not in the gemm tactic space");
}

TEST_CASE("KILN_FORCE_TACTIC and KILN_TACTIC_BLOCKLIST parse, and say what is wrong", "[client][ops][gemm]") {
  auto none = ParseGemmTacticControls(nullptr, nullptr, "");
  REQUIRE(none.ok());
  CHECK(none->forced.empty());
  CHECK(none->Forced("gemm") == nullptr);
  CHECK(none->blocked.empty());

  auto forced = ParseGemmTacticControls("gemm:t64x128x64s3g2", nullptr, "");
  REQUIRE(forced.ok());
  REQUIRE(forced->Forced("gemm") != nullptr);
  CHECK(GemmTacticText(*forced->Forced("gemm")) == "t64x128x64s3g2");
  CHECK(forced->Forced("fp8_gemm") == nullptr);  // per op
  RequireInvalid(ParseGemmTacticControls("t64x128x64s3g2", nullptr, "").status(),
                 "KILN_FORCE_TACTIC='t64x128x64s3g2': 't64x128x64s3g2': expected <op>:<tactic>");
  RequireInvalid(ParseGemmTacticControls("gemm:t64x128", nullptr, "").status(),
                 "KILN_FORCE_TACTIC: 't64x128' is not a gemm tactic");
  RequireInvalid(ParseGemmTacticControls("gemm:t64x128x64s3g2,gemm:t64x64x64s3g2", nullptr, "").status(),
                 "gemm is named twice");
  RequireInvalid(ParseGemmTacticControls("rmsnorm:t64x128x64s3g2", nullptr, "").status(),
                 "KILN_FORCE_TACTIC: 'rmsnorm' has no tactics; the ops with tactics: gemm, grouped_gemm, "
                 "grouped_gemm_masked, fp8_gemm, grouped_fp8_gemm, grouped_fp8_gemm_masked");

  const std::string list = "# known to hang on this stack\n"
                           "gemm t128x256x64s4g8\n"
                           "\n"
                           "gemm t128x128x64s7g8 gpu=H200   # only there\n";
  auto blocked = ParseGemmTacticControls(nullptr, "/etc/kiln/blocklist", list);
  INFO(blocked.status().ToString());
  REQUIRE(blocked.ok());
  REQUIRE(blocked->blocked.size() == 2);
  CHECK(blocked->blocked[1].entry.gpu() == "H200");
  CHECK(blocked->blocked[1].entry.source() == "/etc/kiln/blocklist:4");
  const kiln::gemm::GemmTactic big{128, 256, 4, 8}, mid{128, 128, 7, 8}, other{128, 128, 6, 8};
  CHECK(blocked->Blocks("gemm", big, "NVIDIA H100 80GB HBM3"));
  CHECK(blocked->Blocks("gemm", mid, "NVIDIA H200"));
  CHECK(!blocked->Blocks("gemm", mid, "NVIDIA H100 80GB HBM3"));
  CHECK(!blocked->Blocks("gemm", other, "NVIDIA H200"));
  CHECK(!blocked->Blocks("grouped_gemm", big, "NVIDIA H200"));  // an entry names its op

  // driver= and nvrtc= match only where the environment is known (the daemon's NVRTC).
  auto stack = ParseGemmTacticControls(nullptr, "/b", "gemm t128x256x64s4g8 gpu=H200 driver=13000 nvrtc=13.0\n");
  INFO(stack.status().ToString());
  REQUIRE(stack.ok());
  kiln::v1::TuningEnvironment here;
  here.set_gpu_name("NVIDIA H200");
  here.set_driver_version(13000);
  here.set_nvrtc_version("13.0");
  CHECK(stack->Blocks("gemm", big, "NVIDIA H200", &here));
  here.set_driver_version(12080);
  CHECK(!stack->Blocks("gemm", big, "NVIDIA H200", &here));
  CHECK(!stack->Blocks("gemm", big, "NVIDIA H200"));  // no environment: a driver match cannot be decided

  RequireInvalid(ParseGemmTacticControls(nullptr, "/b", "gemm t128x256x64s4g8\nrmsnorm t1\n").status(),
                 "KILN_TACTIC_BLOCKLIST /b:2: 'rmsnorm t1': 'rmsnorm' has no tactics");
  RequireInvalid(
      ParseGemmTacticControls(nullptr, "/b", "gemm t128x256x64s9g8\n").status(),
      "KILN_TACTIC_BLOCKLIST /b:1: 'gemm t128x256x64s9g8': 't128x256x64s9g8' is not in the gemm tactic space");
  RequireInvalid(
      ParseGemmTacticControls(nullptr, "/b", "gemm t128x256x64s4g8 sm=90\n").status(),
      "KILN_TACTIC_BLOCKLIST /b:1: 'gemm t128x256x64s4g8 sm=90': 'sm=90' after the tactic: expected gpu=, driver= or "
      "nvrtc= matches");
}

TEST_CASE("the grouped and fp8 ops have tactic controls in their own spaces", "[client][ops][gemm]") {
  // fp8 tactics name K 128 a stage and never split; the grouped ops never split.
  auto fp8 = ParseGemmTactic("t128x256x128s4g8", "fp8_gemm");
  REQUIRE(fp8.ok());
  CHECK(GemmTacticText(*fp8, "fp8_gemm") == "t128x256x128s4g8");
  RequireInvalid(
      ParseGemmTactic("t128x256x64s4g8", "fp8_gemm").status(),
      "'t128x256x64s4g8' is not in the fp8_gemm tactic space (tile_m 64 or 128, tile_n 64, 128, 192 or 256, k "
      "128");
  RequireInvalid(ParseGemmTactic("t64x256x128s4g8k2", "grouped_fp8_gemm").status(), "split_k 1, multicast 1;");
  RequireInvalid(ParseGemmTactic("t64x256x64s4g8k2", "grouped_gemm").status(),
                 "is not in the grouped_gemm tactic space");
  CHECK(ParseGemmTactic("t64x256x64s4g8", "grouped_gemm_masked").ok());

  auto controls = ParseGemmTacticControls("fp8_gemm:t128x128x128s6g8,grouped_gemm:t64x128x64s4g2", "/b",
                                          "grouped_fp8_gemm t128x256x128s4g8\nfp8_gemm t64x64x128s8g8 gpu=H200\n");
  INFO(controls.status().ToString());
  REQUIRE(controls.ok());
  REQUIRE(controls->Forced("fp8_gemm") != nullptr);
  CHECK(GemmTacticText(*controls->Forced("fp8_gemm"), "fp8_gemm") == "t128x128x128s6g8");
  CHECK(GemmTacticText(*controls->Forced("grouped_gemm"), "grouped_gemm") == "t64x128x64s4g2");
  CHECK(controls->Forced("gemm") == nullptr);
  const kiln::gemm::GemmTactic wide{128, 256, 4, 8, 1}, small{64, 64, 8, 8, 1};
  CHECK(controls->Blocks("grouped_fp8_gemm", wide, "NVIDIA H100"));
  CHECK(!controls->Blocks("grouped_fp8_gemm_masked", wide, "NVIDIA H100"));
  CHECK(controls->Blocks("fp8_gemm", small, "NVIDIA H200"));
  CHECK(!controls->Blocks("fp8_gemm", small, "NVIDIA H100"));

  // What a blocked choice falls back to: the heuristic's first, then each tactic of the op's
  // space once, largest tiles first.
  for (const char* op : kiln::client::kTacticOps) {
    if (std::string(op) == "gemm") continue;  // gemm walks RankGemmTactics (below)
    INFO(op);
    const kiln::gemm::GemmTactic first{64, 128, 5, 3, 1};
    const auto fallback = kiln::client::FallbackTactics(op, first);
    REQUIRE(fallback.size() > 2);
    CHECK(GemmTacticText(fallback[0], op) == GemmTacticText(first, op));
    CHECK(fallback[1].tile_m == 128);
    CHECK(fallback[1].tile_n == 256);
    CHECK(fallback[1].group_m == 8);
    std::set<std::string> seen;
    for (const auto& t : fallback) {
      CHECK(kiln::client::TacticInSpace(op, t));
      CHECK(t.split_k == 1);
      seen.insert(GemmTacticText(t, op));
    }
    CHECK(seen.size() == fallback.size());
    size_t space = 0;
    for (int tile_m : kiln::gemm::kTileMChoices)
      for (int tile_n : kiln::gemm::kTileNChoices)
        space += static_cast<size_t>(kiln::gemm::GemmMaxStages(tile_m, tile_n, 1, true) - kiln::gemm::kMinStages + 1) *
                 kiln::gemm::kMaxGroupM;
    CHECK(fallback.size() == space);  // the whole space
  }
}

TEST_CASE("the heuristic ranks the whole tactic space, its choice first", "[client][ops][gemm]") {
  for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 4096}, {64, 28672}, {4096, 28672}, {1024, 6144}}) {
    INFO(m << " x " << n);
    const auto ranked = RankGemmTactics(m, n, 4096, 132);
    REQUIRE(!ranked.empty());
    const auto first = kiln::client::ChooseGemmTactic(m, n, 4096, 132);
    CHECK(GemmTacticText(ranked.front()) == GemmTacticText(first));
    std::set<std::string> seen;
    for (const auto& t : ranked) {
      CHECK(kiln::gemm::GemmTacticFits(t));
      seen.insert(GemmTacticText(t));
    }
    CHECK(seen.size() == ranked.size());  // each once
    // Every tile and split at every stage count with every group_m: the whole space (K 4096 is
    // 64 K steps, enough for every split).
    size_t space = 0;
    for (int tile_m : kiln::gemm::kTileMChoices)
      for (int tile_n : kiln::gemm::kTileNChoices)
        for (int split : kiln::gemm::kSplitKChoices)
          space += static_cast<size_t>(kiln::gemm::GemmMaxStages(tile_m, tile_n, split) - kiln::gemm::kMinStages + 1) *
                   kiln::gemm::kMaxGroupM;
    // From M 4096 on, the heuristic's multicast pair is one tactic more.
    CHECK(ranked.size() == space + (first.multicast > 1 ? 1 : 0));
  }
  // Blocking the choice moves to the next: the same tile without multicast, then with one stage
  // fewer... after every raster group of the most stages.
  const auto ranked = RankGemmTactics(4096, 28672, 4096, 132);
  CHECK(GemmTacticText(ranked[0]) == "t128x256x64s4g8m2");
  CHECK(GemmTacticText(ranked[1]) == "t128x256x64s4g8");
  CHECK(GemmTacticText(ranked[2]) == "t128x256x64s4g1");
  // A short K leaves out the splits that would give a block fewer than 4 K steps.
  for (const auto& t : RankGemmTactics(1, 4096, 256, 132)) CHECK(t.split_k == 1);
  bool has_split_2 = false;
  for (const auto& t : RankGemmTactics(1, 4096, 512, 132)) {
    CHECK(t.split_k <= 2);
    has_split_2 = has_split_2 || t.split_k == 2;
  }
  CHECK(has_split_2);
}

// Run only as the child of the test below ([.] keeps it out of a plain run): one gemm call on
// fake device pointers with the environment the parent set; prints the status.
TEST_CASE("child: one gemm call under the process's tactic controls", "[.gemm-controls-child]") {
  using kiln::TensorView;
  const auto at = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
  const uintptr_t base = 0x7f0000000000;
  const auto a = TensorView::Contiguous(at(base), kiln::DType::kBFloat16, {4, 64});
  const auto b = TensorView::Contiguous(at(base + (uintptr_t{1} << 32)), kiln::DType::kBFloat16, {64, 64});
  const auto d = TensorView::Contiguous(at(base + (uintptr_t{2} << 32)), kiln::DType::kBFloat16, {4, 64});
  std::printf("status: %s\n", kiln::ops::gemm(d, a, b).ToString().c_str());
}

TEST_CASE("a process with bad tactic controls refuses its gemm calls, naming the variable", "[client][ops][gemm]") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  kiln::testing::TempDir dir("kiln-gemm-controls");
  const std::string list = dir.path() + "/blocklist";
  std::ofstream(list) << "gemm t128x256x64s4g8\ngemm t999x1x64s4g8\n";
  struct Case {
    std::map<std::string, std::string> env;
    std::string want;
  };
  const Case cases[] = {
      {{{"KILN_FORCE_TACTIC", "gemm:t128x256x64s5g8"}},
       "INVALID_ARGUMENT: kiln::ops::gemm: KILN_FORCE_TACTIC: 't128x256x64s5g8' is not in the gemm tactic space"},
      {{{"KILN_TACTIC_BLOCKLIST", list}},
       "INVALID_ARGUMENT: kiln::ops::gemm: KILN_TACTIC_BLOCKLIST " + list +
           ":2: 'gemm t999x1x64s4g8': 't999x1x64s4g8' is not in"},
      {{{"KILN_TACTIC_BLOCKLIST", dir.path() + "/missing"}},
       "INVALID_ARGUMENT: kiln::ops::gemm: KILN_TACTIC_BLOCKLIST=" + dir.path() + "/missing: cannot read the file"},
  };
  for (const Case& c : cases) {
    kiln::testing::SubprocessOptions options;
    options.argv = {self, "child: one gemm call under the process's tactic controls"};
    options.set_env = c.env;
    options.unset_env = {"KILN_FORCE_TACTIC", "KILN_TACTIC_BLOCKLIST"};
    for (const auto& [k, v] : c.env) std::erase(options.unset_env, k);
    kiln::testing::Subprocess child(options);
    REQUIRE(child.Wait() == 0);
    INFO(child.Output());
    CHECK(child.Output().find("status: " + c.want) != std::string::npos);
  }
}

// Run only as the child of the test below: what the process's KILN_GEMM_PDL makes of the gemm
// family's launches, then the testing override on top of it.
TEST_CASE("child: the gemm family's programmatic dependent launch", "[.gemm-pdl-child]") {
  std::printf("pdl: %d\n", kiln::client::GemmProgrammaticLaunch() ? 1 : 0);
  kiln::client::SetGemmProgrammaticLaunchForTesting(1);
  std::printf("forced on: %d\n", kiln::client::GemmProgrammaticLaunch() ? 1 : 0);
  kiln::client::SetGemmProgrammaticLaunchForTesting(0);
  std::printf("forced off: %d\n", kiln::client::GemmProgrammaticLaunch() ? 1 : 0);
  kiln::client::SetGemmProgrammaticLaunchForTesting(-1);
  std::printf("back: %d\n", kiln::client::GemmProgrammaticLaunch() ? 1 : 0);
}

TEST_CASE("KILN_GEMM_PDL: off by default, 1 turns it on and says so, a bad value is reported", "[client][ops][gemm]") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  struct Case {
    const char* value;  // null: unset
    int want;
    const char* said;  // on stderr, or null for nothing
  };
  const Case cases[] = {
      {nullptr, 0, nullptr},
      {"0", 0, nullptr},
      {"1", 1, "kiln: KILN_GEMM_PDL=1: the gemm family is launched as programmatic dependents"},
      {"yes", 0, "kiln: KILN_GEMM_PDL='yes' is not valid: expected 0 or 1; the default (0) is used"},
  };
  for (const Case& c : cases) {
    INFO("KILN_GEMM_PDL=" << (c.value ? c.value : "(unset)"));
    kiln::testing::SubprocessOptions options;
    options.argv = {self, "child: the gemm family's programmatic dependent launch"};
    if (c.value != nullptr) options.set_env = {{"KILN_GEMM_PDL", c.value}};
    else options.unset_env = {"KILN_GEMM_PDL"};
    kiln::testing::Subprocess child(options);
    REQUIRE(child.Wait() == 0);
    const std::string out = child.Output();
    INFO(out);
    CHECK(out.find("pdl: " + std::to_string(c.want)) != std::string::npos);
    CHECK(out.find("forced on: 1") != std::string::npos);
    CHECK(out.find("forced off: 0") != std::string::npos);
    CHECK(out.find("back: " + std::to_string(c.want)) != std::string::npos);
    if (c.said != nullptr) CHECK(out.find(c.said) != std::string::npos);
    else CHECK(out.find("KILN_GEMM_PDL") == std::string::npos);
  }
}

}  // namespace
