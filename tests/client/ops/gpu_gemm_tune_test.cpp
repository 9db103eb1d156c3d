// [gpu][gemm] kiln::tune::gemm on a real sm_90a GPU (skipped visibly elsewhere), in a child
// process with KILN_TUNING_FILE set (the tuning store is chosen once per process): every
// candidate runs correctly or says why not, the chosen one is the fastest correct one, the
// heuristic's tactic is among them, the result lands in the file, and later gemm calls of the
// same bucket (M 129..256 for M 200) take the tuned tactic while another bucket keeps the
// heuristic's; a gemm call with the tuned tactic still matches the heuristic's result. The
// "[.gemm-tune-report]" case prints the time to tune and the gains at the shapes.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "client/ops/gemm/gemm_ops.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
#include "kiln/ops/gemm.h"
#include "kiln/tune.h"
#include "tests/support/gpu_capability.h"
#include "tests/support/gpu_harness.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::testing::DeviceBuffer;
using kiln::testing::GpuSession;
using kiln::testing::HopperSession;

struct Operands {
  DeviceBuffer a, b, d;
  TensorView ta, tb, td;
  Operands(int64_t m, int64_t n, int64_t k, std::mt19937& rng)
      : a(static_cast<size_t>(m * k * 2)), b(static_cast<size_t>(n * k * 2)), d(static_cast<size_t>(m * n * 2)) {
    a.Upload(kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(m * k), rng, -1.f, 1.f).bytes);
    b.Upload(kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(n * k), rng, -1.f, 1.f).bytes);
    ta = TensorView::Contiguous(a.data(), DType::kBFloat16, {m, k});
    tb = TensorView::Contiguous(b.data(), DType::kBFloat16, {n, k});
    td = TensorView::Contiguous(d.data(), DType::kBFloat16, {m, n});
  }
};

std::string SourceOf(const TensorView& d, const TensorView& a, const TensorView& b, std::string* tactic) {
  auto plan = kiln::client::PlanGemm(d, a, b, nullptr, nullptr, 1.0, "test");
  REQUIRE(plan.ok());
  auto chosen = kiln::client::GemmTacticOfCall(*plan);
  INFO(chosen.status().ToString());
  REQUIRE(chosen.ok());
  *tactic = kiln::client::GemmTacticText(chosen->tactic);
  return chosen->source == kiln::client::GemmTacticSource::kTuned    ? "tuned"
         : chosen->source == kiln::client::GemmTacticSource::kForced ? "forced"
                                                                     : "heuristic";
}

// Run only as the child of the test below: tunes 200 x 1024 x 512 and checks what follows.
TEST_CASE("child: tune a gemm bucket into KILN_TUNING_FILE", "[.gemm-tune-child]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(41);
  Operands x(200, 1024, 512, rng);
  kiln::tune::Options options;
  options.iterations = 10;
  auto report = kiln::tune::gemm(x.td, x.ta, x.tb, options);
  INFO(report.status().ToString());
  REQUIRE(report.ok());
  std::printf("bucket %s chosen %s %.2f us heuristic %s %.2f us, %zu candidates, %.2f s, stored to %s\n",
              report->bucket.c_str(), report->chosen.c_str(), report->chosen_us, report->heuristic.c_str(),
              report->heuristic_us, report->candidates.size(), report->seconds, report->stored_to.c_str());
  CHECK(report->op == "gemm");
  CHECK(report->bucket == "bf16.obf16.m256.n1024.k512");
  CHECK(report->timing == "cuda_events_l2_flushed");
  CHECK(report->candidates.size() >= 6);
  bool heuristic_seen = false;
  for (const auto& c : report->candidates) {
    INFO(c.tactic << ": " << c.failure);
    CHECK(c.ok);  // every candidate of the space is correct on the H200
    if (c.ok) CHECK(c.median_us >= report->chosen_us);
    heuristic_seen = heuristic_seen || c.tactic == report->heuristic;
  }
  CHECK(heuristic_seen);
  CHECK(report->heuristic_us > 0);
  CHECK(report->stored_to.find("KILN_TUNING_FILE") != std::string::npos);

  // The bucket's calls take the tuned tactic; another bucket's do not.
  std::string tactic;
  CHECK(SourceOf(x.td, x.ta, x.tb, &tactic) == "tuned");
  CHECK(tactic == report->chosen);
  Operands same_bucket(129, 1024, 512, rng);
  CHECK(SourceOf(same_bucket.td, same_bucket.ta, same_bucket.tb, &tactic) == "tuned");
  Operands other_bucket(100, 1024, 512, rng);
  CHECK(SourceOf(other_bucket.td, other_bucket.ta, other_bucket.tb, &tactic) == "heuristic");

  // The tuned call gives the heuristic's result (within two roundings).
  REQUIRE(kiln::ops::gemm(x.td, x.ta, x.tb).ok());
  const std::vector<uint8_t> tuned = x.d.Download();
  auto plan = kiln::client::PlanGemm(x.td, x.ta, x.tb, nullptr, nullptr, 1.0, "test");
  REQUIRE(plan.ok());
  auto heuristic = kiln::client::GemmTacticOfCall(*plan, /*skip_tuned=*/true);
  REQUIRE(heuristic.ok());
  REQUIRE(kiln::client::LaunchGemmPlan(*plan, heuristic->tactic, nullptr).ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  const kiln::testing::HostTensor t{DType::kBFloat16, tuned}, h{DType::kBFloat16, x.d.Download()};
  int64_t bad = 0;
  for (size_t i = 0; i < t.size(); ++i) bad += !kiln::testing::Close(t.Get(i), h.Get(i), {1e-3, 3.2e-2});
  CHECK(bad == 0);
  std::printf("child ok\n");
}

TEST_CASE("kiln::tune::gemm stores the fastest candidate and later calls of its bucket use it", "[gpu][gemm]") {
  GpuSession session = HopperSession();  // skips visibly without an sm_90a GPU
  kiln::testing::TempDir dir("kiln-gemm-tune");
  const std::string file = dir.path() + "/tuning.json";
  kiln::testing::SubprocessOptions options;
  options.argv = {std::filesystem::read_symlink("/proc/self/exe").string(),
                  "child: tune a gemm bucket into KILN_TUNING_FILE"};
  options.set_env = {{"KILN_TUNING_FILE", file}, {"KILN_LOADER_LOG", "1"}};
  options.unset_env = {"KILN_FORCE_TACTIC", "KILN_TACTIC_BLOCKLIST"};
  const kiln::testing::RunResult child = kiln::testing::Run(options, std::chrono::seconds(300));
  INFO(child.output);
  CHECK(child.exit_code == 0);
  CHECK(child.output.find("child ok") != std::string::npos);
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  INFO(text.str());
  CHECK(text.str().find("\"bucket\": \"bf16.obf16.m256.n1024.k512\"") != std::string::npos);
  CHECK(text.str().find("\"gpu_name\"") != std::string::npos);
}

// Not a test: the report of the autotuner at Llama-3.1-8B shapes (time to tune one
// bucket, tuned against heuristic). Run with "[.gemm-tune-report]" (results are not stored).
TEST_CASE("gemm autotuner report at the Llama-3.1-8B shapes", "[.gemm-tune-report]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(43);
  for (int64_t m : {1, 64, 256, 4096}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}}) {
      Operands x(m, n, k, rng);
      kiln::tune::Options options;
      options.store = false;
      auto report = kiln::tune::gemm(x.td, x.ta, x.tb, options);
      INFO(report.status().ToString());
      REQUIRE(report.ok());
      int failed = 0;
      for (const auto& c : report->candidates) failed += !c.ok;
      std::printf("tune %-32s %2zu candidates (%d failed) in %5.2f s: heuristic %-20s %9.2f us, tuned %-20s %9.2f us, "
                  "gain %.3fx\n",
                  report->bucket.c_str(), report->candidates.size(), failed, report->seconds, report->heuristic.c_str(),
                  report->heuristic_us, report->chosen.c_str(), report->chosen_us,
                  report->heuristic_us / report->chosen_us);
    }
  }
}

}  // namespace
