// [gpu][gemm] kiln::tune on a real sm_90a GPU (skipped visibly elsewhere), in child processes
// with KILN_TUNING_FILE set (the tuning store is chosen once per process): for gemm, fp8_gemm,
// grouped_gemm (uneven counts, an empty group), grouped_gemm_masked and grouped_fp8_gemm every
// candidate runs correctly or says why not, the chosen one is the fastest correct one, the
// heuristic's tactic is among them, the result lands in the file, and later calls of the same
// bucket (M 129..256 for M 200) take the tuned tactic while another bucket keeps the
// heuristic's; a call with the tuned tactic still matches the heuristic's result. `kiln tune
// run` does the same from the command line. The "[.gemm-tune-report]" case prints the time to
// tune and the gains at the shapes.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "client/ops/gemm/fp8_gemm_ops.h"
#include "client/ops/gemm/gemm_ops.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
#include "client/ops/gemm/grouped_gemm_ops.h"
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

// What a report of any op must say: every candidate correct on the H200 (or why not), the
// chosen one the fastest, the heuristic's among them, stored to KILN_TUNING_FILE.
void CheckReport(const kiln::tune::Report& r, const std::string& op, const std::string& bucket) {
  std::printf("%s %s: chosen %s %.2f us heuristic %s %.2f us, %zu candidates, %.2f s\n", r.op.c_str(), r.bucket.c_str(),
              r.chosen.c_str(), r.chosen_us, r.heuristic.c_str(), r.heuristic_us, r.candidates.size(), r.seconds);
  CHECK(r.op == op);
  CHECK(r.bucket == bucket);
  CHECK(r.candidates.size() >= 6);
  bool heuristic_seen = false;
  for (const auto& c : r.candidates) {
    INFO(op << " " << c.tactic << ": " << c.failure);
    CHECK(c.ok);
    if (c.ok) CHECK(c.median_us >= r.chosen_us);
    heuristic_seen = heuristic_seen || c.tactic == r.heuristic;
  }
  CHECK(heuristic_seen);
  CHECK(r.heuristic_us > 0);
  CHECK(r.stored_to.find("KILN_TUNING_FILE") != std::string::npos);
}

std::string SourceText(kiln::client::GemmTacticSource source) {
  return source == kiln::client::GemmTacticSource::kTuned    ? "tuned"
         : source == kiln::client::GemmTacticSource::kForced ? "forced"
                                                             : "heuristic";
}

// d after the op's own call (the tuned tactic) against d after the heuristic's tactic: within
// two roundings of bf16. Rows no group covers stay poisoned in both.
void CheckSameResult(DeviceBuffer& d, const std::function<kiln::Status()>& op_call,
                     const std::function<kiln::Status()>& heuristic_call) {
  auto run = [&](const std::function<kiln::Status()>& call) {
    std::vector<uint8_t> poison(d.Download().size(), 0xFF);
    d.Upload(poison);
    const kiln::Status s = call();
    INFO(s.ToString());
    REQUIRE(s.ok());
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    return kiln::testing::HostTensor{DType::kBFloat16, d.Download()};
  };
  const kiln::testing::HostTensor t = run(op_call), h = run(heuristic_call);
  int64_t bad = 0;
  for (size_t i = 0; i < t.size(); ++i)
    bad += !(std::isnan(t.Get(i)) && std::isnan(h.Get(i))) && !kiln::testing::Close(t.Get(i), h.Get(i), {1e-3, 3.2e-2});
  CHECK(bad == 0);
}

// Run only as the child of the test below: tunes a bucket of each of grouped_gemm (uneven
// counts, an empty group), grouped_gemm_masked (counts 0 and M_max), fp8_gemm and
// grouped_fp8_gemm, then checks that the op's next call takes the tuned tactic.
TEST_CASE("child: tune the fp8 and grouped ops into KILN_TUNING_FILE", "[.gemm-tune-family-child]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(47);
  const DType bf16 = DType::kBFloat16, fp8 = DType::kFloat8E4M3, f32 = DType::kFloat32;
  kiln::tune::Options options;
  options.iterations = 8;
  auto upload = [&](DType dtype, int64_t count, float lo, float hi) {
    auto buffer = std::make_unique<DeviceBuffer>(static_cast<size_t>(count) * kiln::DTypeSize(dtype));
    buffer->Upload(kiln::testing::RandomTensor(dtype, static_cast<size_t>(count), rng, lo, hi).bytes);
    return buffer;
  };
  using kiln::testing::UploadInts;

  {  // grouped_gemm, contiguous: E 4, T 600 (150 a group on average: bucket m256)
    const int64_t e = 4, t = 600, n = 512, k = 256;
    auto a = upload(bf16, t * k, -1, 1), b = upload(bf16, e * n * k, -1, 1);
    DeviceBuffer d(static_cast<size_t>(t * n * 2));
    auto indptr = UploadInts({0, 0, 100, 350, 600});
    const TensorView ta = TensorView::Contiguous(a->data(), bf16, {t, k}),
                     tb = TensorView::Contiguous(b->data(), bf16, {e, n, k}),
                     td = TensorView::Contiguous(d.data(), bf16, {t, n}),
                     ti = TensorView::Contiguous(indptr->data(), DType::kInt32, {e + 1});
    auto report = kiln::tune::grouped_gemm(td, ta, tb, ti, options);
    INFO(report.status().ToString());
    REQUIRE(report.ok());
    CheckReport(*report, "grouped_gemm", "bf16.obf16.e4.m256.n512.k256");
    auto plan = kiln::client::PlanGroupedGemm(td, ta, tb, ti, "test");
    REQUIRE(plan.ok());
    auto chosen = kiln::client::GroupedGemmTacticOfCall(*plan);
    REQUIRE(chosen.ok());
    CHECK(SourceText(chosen->source) == "tuned");
    CHECK(kiln::client::GemmTacticText(chosen->tactic, "grouped_gemm") == report->chosen);
    auto heuristic = kiln::client::GroupedGemmTacticOfCall(*plan, /*skip_tuned=*/true);
    REQUIRE(heuristic.ok());
    CHECK(SourceText(heuristic->source) == "heuristic");
    CheckSameResult(
        d, [&] { return kiln::ops::grouped_gemm(td, ta, tb, ti); },
        [&] { return kiln::client::LaunchGroupedGemmPlan(*plan, heuristic->tactic, nullptr); });
  }
  {  // grouped_gemm_masked: E 3, M_max 64, counts 64, 0, 17
    const int64_t e = 3, m_max = 64, n = 256, k = 128;
    auto a = upload(bf16, e * m_max * k, -1, 1), b = upload(bf16, e * n * k, -1, 1);
    DeviceBuffer d(static_cast<size_t>(e * m_max * n * 2));
    auto counts = UploadInts({64, 0, 17});
    const TensorView ta = TensorView::Contiguous(a->data(), bf16, {e, m_max, k}),
                     tb = TensorView::Contiguous(b->data(), bf16, {e, n, k}),
                     td = TensorView::Contiguous(d.data(), bf16, {e, m_max, n}),
                     tc = TensorView::Contiguous(counts->data(), DType::kInt32, {e});
    auto report = kiln::tune::grouped_gemm_masked(td, ta, tb, tc, options);
    INFO(report.status().ToString());
    REQUIRE(report.ok());
    CheckReport(*report, "grouped_gemm_masked", "bf16.obf16.e3.m64.n256.k128");
    auto plan = kiln::client::PlanGroupedGemmMasked(td, ta, tb, tc, "test");
    REQUIRE(plan.ok());
    auto chosen = kiln::client::GroupedGemmTacticOfCall(*plan);
    REQUIRE(chosen.ok());
    CHECK(SourceText(chosen->source) == "tuned");
    CHECK(kiln::client::GemmTacticText(chosen->tactic, "grouped_gemm_masked") == report->chosen);
  }
  {  // fp8_gemm: 200 x 512 x 512 (bucket m256)
    const int64_t m = 200, n = 512, k = 512, kb = k / 128, nb = n / 128;
    auto a = upload(fp8, m * k, -1, 1), b = upload(fp8, n * k, -1, 1);
    auto sa = upload(f32, m * kb, 0.5f, 2.f), sb = upload(f32, nb * kb, 0.5f, 2.f);
    DeviceBuffer d(static_cast<size_t>(m * n * 2));
    const TensorView ta = TensorView::Contiguous(a->data(), fp8, {m, k}),
                     tb = TensorView::Contiguous(b->data(), fp8, {n, k}),
                     tsa = TensorView::Contiguous(sa->data(), f32, {m, kb}),
                     tsb = TensorView::Contiguous(sb->data(), f32, {nb, kb}),
                     td = TensorView::Contiguous(d.data(), bf16, {m, n});
    auto report = kiln::tune::fp8_gemm(td, ta, tb, tsa, tsb, options);
    INFO(report.status().ToString());
    REQUIRE(report.ok());
    CheckReport(*report, "fp8_gemm", "fp8_e4m3.obf16.m256.n512.k512");
    CHECK(report->chosen.find("x128s") != std::string::npos);  // fp8 tactics name K 128 a stage
    auto plan = kiln::client::PlanFp8Gemm(td, ta, tb, tsa, tsb, "test");
    REQUIRE(plan.ok());
    auto chosen = kiln::client::Fp8GemmTacticOfCall(*plan);
    REQUIRE(chosen.ok());
    CHECK(SourceText(chosen->source) == "tuned");
    CHECK(kiln::client::GemmTacticText(chosen->tactic, "fp8_gemm") == report->chosen);
    auto heuristic = kiln::client::Fp8GemmTacticOfCall(*plan, /*skip_tuned=*/true);
    REQUIRE(heuristic.ok());
    CheckSameResult(
        d, [&] { return kiln::ops::fp8_gemm(td, ta, tb, tsa, tsb); },
        [&] { return kiln::client::LaunchFp8GemmPlan(*plan, heuristic->tactic, nullptr); });
  }
  {  // grouped_fp8_gemm, contiguous: E 2, T 300
    const int64_t e = 2, t = 300, n = 256, k = 256, kb = k / 128, nb = n / 128;
    auto a = upload(fp8, t * k, -1, 1), b = upload(fp8, e * n * k, -1, 1);
    auto sa = upload(f32, t * kb, 0.5f, 2.f), sb = upload(f32, e * nb * kb, 0.5f, 2.f);
    DeviceBuffer d(static_cast<size_t>(t * n * 2));
    auto indptr = UploadInts({0, 120, 300});
    const TensorView ta = TensorView::Contiguous(a->data(), fp8, {t, k}),
                     tb = TensorView::Contiguous(b->data(), fp8, {e, n, k}),
                     tsa = TensorView::Contiguous(sa->data(), f32, {t, kb}),
                     tsb = TensorView::Contiguous(sb->data(), f32, {e, nb, kb}),
                     td = TensorView::Contiguous(d.data(), bf16, {t, n}),
                     ti = TensorView::Contiguous(indptr->data(), DType::kInt32, {e + 1});
    auto report = kiln::tune::grouped_fp8_gemm(td, ta, tb, tsa, tsb, ti, options);
    INFO(report.status().ToString());
    REQUIRE(report.ok());
    CheckReport(*report, "grouped_fp8_gemm", "fp8_e4m3.obf16.e2.m256.n256.k256");
    auto plan = kiln::client::PlanGroupedFp8Gemm(td, ta, tb, tsa, tsb, ti, "test");
    REQUIRE(plan.ok());
    auto chosen = kiln::client::GroupedGemmTacticOfCall(*plan);
    REQUIRE(chosen.ok());
    CHECK(SourceText(chosen->source) == "tuned");
  }
  std::printf("child ok\n");
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("kiln::tune stores the fp8 and grouped ops' tactics and their later calls use them", "[gpu][gemm]") {
  GpuSession session = HopperSession();  // skips visibly without an sm_90a GPU
  kiln::testing::TempDir dir("kiln-gemm-family-tune");
  const std::string file = dir.path() + "/tuning.json";
  kiln::testing::SubprocessOptions options;
  options.argv = {std::filesystem::read_symlink("/proc/self/exe").string(),
                  "child: tune the fp8 and grouped ops into KILN_TUNING_FILE"};
  options.set_env = {{"KILN_TUNING_FILE", file}, {"KILN_LOADER_LOG", "1"}};
  options.unset_env = {"KILN_FORCE_TACTIC", "KILN_TACTIC_BLOCKLIST"};
  const kiln::testing::RunResult child = kiln::testing::Run(options, std::chrono::seconds(400));
  INFO(child.output);
  CHECK(child.exit_code == 0);
  CHECK(child.output.find("child ok") != std::string::npos);
  const std::string text = ReadText(file);
  INFO(text);
  for (const char* bucket : {"bf16.obf16.e4.m256.n512.k256", "bf16.obf16.e3.m64.n256.k128",
                             "fp8_e4m3.obf16.m256.n512.k512", "fp8_e4m3.obf16.e2.m256.n256.k256"})
    CHECK(text.find(std::string("\"bucket\": \"") + bucket + "\"") != std::string::npos);
}

TEST_CASE("kiln tune run tunes a shape on the GPU and stores it where the library looks", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  kiln::testing::TempDir dir("kiln-tune-run");
  const std::string file = dir.path() + "/tuning.json";
  auto run = [&](std::vector<std::string> args) {
    kiln::testing::SubprocessOptions p;
    p.argv = {kiln::testing::KilnCliPath(), "tune", "run"};
    p.argv.insert(p.argv.end(), args.begin(), args.end());
    p.set_env = {{"KILN_TUNING_FILE", file}};
    p.unset_env = {"KILN_FORCE_TACTIC", "KILN_TACTIC_BLOCKLIST"};
    return kiln::testing::Run(p, std::chrono::seconds(300));
  };
  const kiln::testing::RunResult json = run(
      {"grouped_gemm_masked", "--m", "64", "--n", "256", "--k", "128", "--groups", "4", "--iterations", "5", "--json"});
  INFO(json.output);
  REQUIRE(json.exit_code == 0);
  const auto report = nlohmann::json::parse(json.output.substr(json.output.find('{')));
  CHECK(report["op"] == "grouped_gemm_masked");
  CHECK(report["bucket"] == "bf16.obf16.e4.m64.n256.k128");
  CHECK(!report["chosen"].get<std::string>().empty());
  CHECK(report["candidates"].size() >= 6);
  CHECK(report["stored_to"].get<std::string>().find("KILN_TUNING_FILE") != std::string::npos);
  CHECK(ReadText(file).find("\"bucket\": \"bf16.obf16.e4.m64.n256.k128\"") != std::string::npos);

  const kiln::testing::RunResult table = run(
      {"gemm", "--m", "100", "--n", "512", "--k", "256", "--iterations", "5", "--no-store"});
  INFO(table.output);
  REQUIRE(table.exit_code == 0);
  CHECK(table.output.find("chosen") != std::string::npos);
  CHECK(table.output.find("gemm bf16.obf16.m128.n512.k256: ") != std::string::npos);
  CHECK(table.output.find("stored to nowhere: Options::store is false") != std::string::npos);
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
