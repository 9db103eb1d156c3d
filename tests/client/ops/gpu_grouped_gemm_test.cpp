// [gpu][gemm] kiln::ops::grouped_gemm and grouped_gemm_masked, and their block-scaled fp8 forms
// grouped_fp8_gemm and grouped_fp8_gemm_masked ([fp8]), on a real sm_90a GPU (skipped visibly
// elsewhere) against a float64 CPU reference (fp8: of the dequantized matrices): empty groups,
// groups of one row, groups of more rows than a tile, N and K that no tile (or scale block)
// divides, 1 to 256 groups, every tile forced, masked counts of 0 and M_max, rows outside the
// groups untouched, tables out of range clamped (no write outside d), the C ABI; the contiguous
// layout's silu_and_mul epilogue (fused_moe's gate-and-up GEMM, every tile); forced tiles store
// through TMA where they can (the interior of a group), the default by the groups' rows; A's rows
// gathered through a row table (every tile, bad entries read zeros). Fresh random
// data (and scales) each case, d poisoned (NaN) before each launch. Tolerance as
// gpu_gemm_test.cpp's (fp8: as gpu_fp8_gemm_test.cpp's, 2^-12 of the block terms' magnitude).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "client/ops/gemm/grouped_gemm_ops.h"
#include "client/ops/gemm/grouped_gemm_plan.h"
#include "kiln/client.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/ops/gemm.h"
#include "tests/support/gpu_capability.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::testing::DeviceBuffer;
using kiln::testing::GpuSession;
using kiln::testing::HopperSession;
using kiln::testing::HostTensor;
using kiln::testing::ToDLTensor;

constexpr DType kFp8 = DType::kFloat8E4M3;

struct Case {
  bool masked = false;
  DType in = DType::kBFloat16;  // kFp8: the grouped_fp8 ops, with scales
  DType out = DType::kBFloat16;
  std::vector<int64_t> counts;  // rows of each group (masked: the valid rows; may exceed m_max: clamped)
  int64_t m_max = 0;            // masked
  int64_t n = 8, k = 8;
  // contiguous: the m_indptr the kernel gets instead of the counts' (a table out of range).
  std::vector<int32_t> raw_indptr;
  int64_t rows = 0;  // contiguous with raw_indptr: T
  const kiln::gemm::GemmTactic* tactic = nullptr;
  bool c_api = false;
  // contiguous: the silu_and_mul epilogue: each group's n rows of b are [gate; up], d has n / 2
  // columns silu(gate) * up.
  bool silu_and_mul = false;
  // contiguous: A's rows gathered (GroupedGemmGather): row r of the groups is row gather[r] /
  // divisor of a [source_rows, k], zeros for an entry outside [0, source_rows * divisor). Empty:
  // a's rows in place.
  std::vector<int32_t> gather;
  int64_t divisor = 1;
  int64_t source_rows = 0;

  std::string Describe() const {
    std::string s = std::string(masked ? "masked" : "contiguous") + " " + kiln::DTypeName(in) + "->" +
                    kiln::DTypeName(out) + " E=" + std::to_string(counts.size()) + " n=" + std::to_string(n) +
                    " k=" + std::to_string(k) + (masked ? " m_max=" + std::to_string(m_max) : "") + " counts";
    for (size_t i = 0; i < counts.size() && i < 12; ++i) s += " " + std::to_string(counts[i]);
    if (tactic != nullptr) s += " tile " + std::to_string(tactic->tile_m) + "x" + std::to_string(tactic->tile_n);
    return s + (c_api ? " (C ABI)" : "") + (silu_and_mul ? " silu_and_mul" : "") +
           (gather.empty() ? ""
                           : " gathered from " + std::to_string(source_rows) + " rows / " + std::to_string(divisor));
  }
};

void Run(const Case& c, std::mt19937& rng) {
  INFO(c.Describe());
  const int64_t e = static_cast<int64_t>(c.counts.size());
  // The table the kernel reads, and each group's [first, end) rows as the kernel must clamp them.
  std::vector<int32_t> table;
  std::vector<std::pair<int64_t, int64_t>> span(static_cast<size_t>(e));
  int64_t rows = 0;
  if (c.masked) {
    rows = e * c.m_max;
    for (int64_t g = 0; g < e; ++g) {
      table.push_back(static_cast<int32_t>(c.counts[static_cast<size_t>(g)]));
      span[static_cast<size_t>(g)] = {g * c.m_max, g * c.m_max + std::clamp<int64_t>(table.back(), 0, c.m_max)};
    }
  } else if (!c.raw_indptr.empty()) {
    rows = c.rows;
    table = c.raw_indptr;
    for (int64_t g = 0; g < e; ++g) {
      const int64_t first = std::clamp<int64_t>(table[static_cast<size_t>(g)], 0, rows);
      const int64_t end = std::clamp<int64_t>(table[static_cast<size_t>(g + 1)], first, rows);
      span[static_cast<size_t>(g)] = {first, end};
    }
  } else {
    table.push_back(0);
    for (int64_t g = 0; g < e; ++g) {
      span[static_cast<size_t>(g)] = {rows, rows + c.counts[static_cast<size_t>(g)]};
      rows += c.counts[static_cast<size_t>(g)];
      table.push_back(static_cast<int32_t>(rows));
    }
  }
  const size_t out_es = kiln::DTypeSize(c.out);
  const int64_t d_cols = c.silu_and_mul ? c.n / 2 : c.n;
  const bool fp8 = c.in == kFp8;
  const int64_t kb = kiln::gemm::Fp8ScaleBlocks(c.k), nb = kiln::gemm::Fp8ScaleBlocks(c.n);
  const bool gathered = !c.gather.empty();
  if (gathered) REQUIRE(static_cast<int64_t>(c.gather.size()) == rows);
  // The row of a that row r of the groups reads, or -1 (zeros).
  auto source_of = [&](int64_t r) -> int64_t {
    if (!gathered) return r;
    const int64_t entry = c.gather[static_cast<size_t>(r)];
    return entry >= 0 && entry / c.divisor < c.source_rows ? entry / c.divisor : -1;
  };
  const size_t arows = static_cast<size_t>(std::max<int64_t>(gathered ? c.source_rows : rows, 1));
  HostTensor a = kiln::testing::RandomTensor(c.in, arows * static_cast<size_t>(c.k), rng, -1.f, 1.f);
  HostTensor b = kiln::testing::RandomTensor(c.in, static_cast<size_t>(e * c.n * c.k), rng, -1.f, 1.f);
  // fp8's scales (a row per row of a; ceil(n / 128) rows per group), drawn for every case.
  HostTensor sa = kiln::testing::RandomTensor(DType::kFloat32, arows * static_cast<size_t>(kb), rng, 0.25f, 4.f);
  HostTensor sb = kiln::testing::RandomTensor(DType::kFloat32, static_cast<size_t>(e * nb * kb), rng, 0.25f, 4.f);
  // d with 64 guard rows after it: a write outside d lands there.
  const size_t d_bytes = static_cast<size_t>(rows * d_cols) * out_es, guard = static_cast<size_t>(64 * d_cols) * out_es;
  DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dd(d_bytes + guard), dtable(table.size() * 4 + 4),
      dsa(sa.bytes.size()), dsb(sb.bytes.size()), dgather(c.gather.size() * 4 + 4);
  da.Upload(a.bytes);
  db.Upload(b.bytes);
  dsa.Upload(sa.bytes);
  dsb.Upload(sb.bytes);
  dd.Poison();
  std::vector<uint8_t> table_bytes(table.size() * 4);
  std::memcpy(table_bytes.data(), table.data(), table_bytes.size());
  dtable.Upload(table_bytes);
  if (gathered) {
    std::vector<uint8_t> gather_bytes(c.gather.size() * 4);
    std::memcpy(gather_bytes.data(), c.gather.data(), gather_bytes.size());
    dgather.Upload(gather_bytes);
  }

  const int64_t a_rows = gathered ? c.source_rows : rows;
  const auto ta = c.masked ? TensorView::Contiguous(da.data(), c.in, {e, c.m_max, c.k})
                           : TensorView::Contiguous(da.data(), c.in, {a_rows, c.k});
  const auto tb = TensorView::Contiguous(db.data(), c.in, {e, c.n, c.k});
  const auto td = c.masked ? TensorView::Contiguous(dd.data(), c.out, {e, c.m_max, d_cols})
                           : TensorView::Contiguous(dd.data(), c.out, {rows, d_cols});
  const auto tt = TensorView::Contiguous(dtable.data(), DType::kInt32, {static_cast<int64_t>(table.size())});
  const auto tsa = c.masked ? TensorView::Contiguous(dsa.data(), DType::kFloat32, {e, c.m_max, kb})
                            : TensorView::Contiguous(dsa.data(), DType::kFloat32, {a_rows, kb});
  const auto tsb = TensorView::Contiguous(dsb.data(), DType::kFloat32, {e, nb, kb});
  const auto tgather = TensorView::Contiguous(dgather.data(), DType::kInt32, {rows});
  const kiln::client::GroupedGemmGather gather{&tgather, c.divisor};
  kiln::Status status;
  if (gathered) {
    // No public op of its own (fused_moe's and fused_moe_fp8's gate-and-up GEMMs): the client's
    // plans, then the call's tactic or the forced one.
    auto plan = c.silu_and_mul ? kiln::client::PlanGroupedGemmSiluAndMul(td, ta, tb, tt, "test", &gather)
                : fp8          ? kiln::client::PlanGroupedFp8Gemm(td, ta, tb, tsa, tsb, tt, "test", &gather)
                               : kiln::client::PlanGroupedGemm(td, ta, tb, tt, "test", &gather);
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    if (c.tactic != nullptr) plan->stores = kiln::client::GroupedGemmPlan::Stores::kThroughTma;
    status = c.tactic != nullptr ? kiln::client::LaunchGroupedGemmPlan(*plan, *c.tactic, nullptr)
                                 : kiln::client::LaunchGroupedGemmPlanOfCall(*plan, nullptr);
  } else if (c.silu_and_mul) {
    // No public op of its own (fused_moe's step): the client's plan, then the call's tactic or
    // the forced one.
    auto plan = kiln::client::PlanGroupedGemmSiluAndMul(td, ta, tb, tt, "test");
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    if (c.tactic != nullptr) plan->stores = kiln::client::GroupedGemmPlan::Stores::kThroughTma;
    status = c.tactic != nullptr ? kiln::client::LaunchGroupedGemmPlan(*plan, *c.tactic, nullptr)
                                 : kiln::client::LaunchGroupedGemmPlanOfCall(*plan, nullptr);
  } else if (c.c_api) {
    DLTensor dl_d = ToDLTensor(td), dl_a = ToDLTensor(ta), dl_b = ToDLTensor(tb), dl_t = ToDLTensor(tt),
             dl_sa = ToDLTensor(tsa), dl_sb = ToDLTensor(tsb);
    kiln_status rc;
    if (fp8)
      rc = c.masked ? kiln_grouped_fp8_gemm_masked(&dl_d, &dl_a, &dl_b, &dl_sa, &dl_sb, &dl_t, nullptr)
                    : kiln_grouped_fp8_gemm(&dl_d, &dl_a, &dl_b, &dl_sa, &dl_sb, &dl_t, nullptr);
    else
      rc = c.masked ? kiln_grouped_gemm_masked(&dl_d, &dl_a, &dl_b, &dl_t, nullptr)
                    : kiln_grouped_gemm(&dl_d, &dl_a, &dl_b, &dl_t, nullptr);
    INFO(kiln_last_error());
    REQUIRE(rc == KILN_OK);
  } else if (c.tactic != nullptr) {
    auto plan = fp8 ? (c.masked ? kiln::client::PlanGroupedFp8GemmMasked(td, ta, tb, tsa, tsb, tt, "test")
                                : kiln::client::PlanGroupedFp8Gemm(td, ta, tb, tsa, tsb, tt, "test"))
                    : (c.masked ? kiln::client::PlanGroupedGemmMasked(td, ta, tb, tt, "test")
                                : kiln::client::PlanGroupedGemm(td, ta, tb, tt, "test"));
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    // A forced tile stores through TMA where it has the staging buffers, whatever the groups'
    // rows (the default does from kGroupedTmaStoreMinRows a group): a consumer's whole 64 rows
    // in a group through TMA, a partial tile's from registers, in one launch.
    plan->stores = kiln::client::GroupedGemmPlan::Stores::kThroughTma;
    status = kiln::client::LaunchGroupedGemmPlan(*plan, *c.tactic, nullptr);
  } else if (fp8) {
    status = c.masked ? kiln::ops::grouped_fp8_gemm_masked(td, ta, tb, tsa, tsb, tt)
                      : kiln::ops::grouped_fp8_gemm(td, ta, tb, tsa, tsb, tt);
  } else {
    status = c.masked ? kiln::ops::grouped_gemm_masked(td, ta, tb, tt) : kiln::ops::grouped_gemm(td, ta, tb, tt);
  }
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  const std::vector<uint8_t> all = dd.Download();
  HostTensor d{c.out, std::vector<uint8_t>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(d_bytes))};

  // Each row: the product of its group, or untouched (poison) when no group has it.
  std::vector<int64_t> group_of(static_cast<size_t>(rows), -1);
  for (int64_t g = 0; g < e; ++g)
    for (int64_t r = span[static_cast<size_t>(g)].first; r < span[static_cast<size_t>(g)].second; ++r)
      if (group_of[static_cast<size_t>(r)] < 0) group_of[static_cast<size_t>(r)] = g;
  const auto tol = kiln::testing::ToleranceFor(c.out);
  int64_t bad = 0, touched = 0;
  std::string first_bad;
  // Column j of row r's product (and the sum of its terms' magnitudes).
  auto product = [&](int64_t row, int64_t g, int64_t j, double* magnitude) {
    double sum = 0;
    *magnitude = 0;
    const int64_t r = source_of(row);
    if (r < 0) return sum;  // a gathered row of zeros
    for (int64_t l = 0; l < c.k; ++l) {
      double p = a.Get(static_cast<size_t>(r * c.k + l)) * b.Get(static_cast<size_t>((g * c.n + j) * c.k + l));
      if (fp8)
        p *= sa.Get(static_cast<size_t>(r * kb + l / 128)) *
             sb.Get(static_cast<size_t>((g * nb + j / 128) * kb + l / 128));
      sum += p;
      *magnitude += std::fabs(p);
    }
    return sum;
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = group_of[static_cast<size_t>(r)];
    for (int64_t j = 0; j < d_cols; ++j) {
      const size_t at = static_cast<size_t>(r * d_cols + j);
      if (g < 0) {
        for (size_t byte = 0; byte < out_es; ++byte) touched += d.bytes[at * out_es + byte] != 0xFF;
        continue;
      }
      double want = 0, magnitude = 0;
      if (c.silu_and_mul) {
        // silu(gate) * up: an error e in gate moves it by at most 1.1 |up| e (silu' is within
        // [-0.1, 1.1]), one in up by |silu(gate)| e; each factor's fp32 sum errs by 2^-20 of its
        // terms' magnitude, which `magnitude` carries through.
        double gate_mag = 0, up_mag = 0;
        const double gate = product(r, g, j, &gate_mag), up = product(r, g, j + c.n / 2, &up_mag);
        const double silu = gate / (1.0 + std::exp(-gate));
        want = silu * up;
        magnitude = 1.1 * gate_mag * std::fabs(up) + up_mag * std::fabs(silu);
      } else {
        want = product(r, g, j, &magnitude);
      }
      const double got = d.Get(at);
      // fp32 accumulation; fp8: the tensor cores' in-block sums (gpu_fp8_gemm_test.cpp).
      if (!kiln::testing::Close(got, want, {tol.abs + std::ldexp(magnitude, fp8 ? -12 : -20), tol.rel}) && bad++ == 0)
        first_bad = "row " + std::to_string(r) + " (group " + std::to_string(g) + ") col " + std::to_string(j) +
                    ": got " + std::to_string(got) + ", want " + std::to_string(want);
    }
  }
  INFO("first mismatch: " << first_bad << " (" << bad << " in all)");
  CHECK(bad == 0);
  INFO("bytes written in rows of no group");
  CHECK(touched == 0);
  const bool guard_intact = std::all_of(all.begin() + static_cast<std::ptrdiff_t>(d_bytes), all.end(),
                                        [](uint8_t v) { return v == 0xFF; });
  INFO("bytes written past d");
  CHECK(guard_intact);
}

std::vector<int64_t> RandomCounts(int64_t e, int64_t t, std::mt19937& rng) {
  std::vector<int64_t> counts(static_cast<size_t>(e), 0);
  std::uniform_int_distribution<int64_t> pick(0, e - 1);
  for (int64_t i = 0; i < t; ++i) ++counts[static_cast<size_t>(pick(rng))];
  return counts;
}

// The output of a case of inputs `in`: the same 16-bit type, or bf16 for fp8.
DType OutOf(DType in) { return in == kFp8 ? DType::kBFloat16 : in; }

// `run(tactic)` for every tile of the grouped space at its fewest and its most stages (raster
// groups of 3 tile rows).
template <typename Run>
void ForEveryGroupedTile(Run run) {
  for (int tile_m : kiln::gemm::kTileMChoices)
    for (int tile_n : kiln::gemm::kTileNChoices)
      for (int stages : {kiln::gemm::kMinStages, kiln::gemm::GemmMaxStages(tile_m, tile_n, 1, true)})
        run(kiln::gemm::GemmTactic{tile_m, tile_n, stages, 3, 1});
}

TEST_CASE("grouped_gemm (contiguous) and grouped_fp8_gemm match float64: empty and one-row groups, 1..256 groups",
          "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(20261203);
  for (DType in : {DType::kBFloat16, DType::kFloat16, kFp8}) {
    // N and K that no tile divides (K 144 and 528: a partial last scale block for fp8).
    for (auto [n, k] : {std::pair<int64_t, int64_t>{136, 144}, {264, 528}, {512, 256}}) {
      for (const std::vector<int64_t>& counts : std::vector<std::vector<int64_t>>{
               {1},                        // one group, one row
               {300},                      // one group of several tiles
               {0, 1, 0, 200, 1, 0, 129},  // empty groups, first and last included, one-row groups
               {0, 0, 0},                  // no rows at all
           }) {
        Case c;
        c.in = in;
        c.out = OutOf(in);
        c.counts = counts;
        c.n = n;
        c.k = k;
        Run(c, rng);
      }
      Case many;
      many.in = in;
      many.out = OutOf(in);
      many.counts = RandomCounts(128, 1000, rng);
      many.n = n;
      many.k = k;
      Run(many, rng);
    }
    // fp32 out; the C ABI.
    Case fp32;
    fp32.in = in;
    fp32.out = DType::kFloat32;
    fp32.counts = {5, 0, 77};
    fp32.n = 128;
    fp32.k = 128;
    Run(fp32, rng);
    fp32.c_api = true;
    Run(fp32, rng);
  }
  Case widest;
  widest.counts = RandomCounts(256, 700, rng);
  widest.counts[0] = 0;
  widest.counts[255] = 3;
  widest.n = 64;
  widest.k = 64;
  Run(widest, rng);
}

TEST_CASE("grouped_gemm: every tile is correct (bf16 and fp8), and a table out of range never writes outside d",
          "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(29);
  for (DType in : {DType::kBFloat16, kFp8}) {
    for (bool masked : {false, true}) {
      ForEveryGroupedTile([&](const kiln::gemm::GemmTactic& tactic) {
        Case c;
        c.in = in;
        c.out = OutOf(in);
        c.masked = masked;
        c.counts = masked ? std::vector<int64_t>{0, 70, 130, 1} : std::vector<int64_t>{70, 0, 131, 1, 64};
        c.m_max = 130;
        c.n = 392;
        c.k = 400;  // K 400: 4 scale blocks, the last partial
        c.tactic = &tactic;
        Run(c, rng);
      });
    }
  }
  // Out of range: negative, past T, decreasing. Clamped into [0, T] and each end to at least its
  // start: {-5, 40, 40, 1000} is rows 0..39, none, 40..99; {0, 50, 20, 20} is rows 0..49, none,
  // none (rows 50..99 of no group stay untouched).
  for (const std::vector<int32_t>& table : {std::vector<int32_t>{-5, 40, 40, 1000}, {0, 50, 20, 20}}) {
    Case bad;
    bad.counts = {0, 0, 0};
    bad.rows = 100;
    bad.raw_indptr = table;
    bad.n = 64;
    bad.k = 64;
    Run(bad, rng);
  }
  // masked counts beyond M_max and negative: clamped to M_max and 0.
  Case masked_bad;
  masked_bad.masked = true;
  masked_bad.counts = {-3, 500, 7};
  masked_bad.m_max = 33;
  masked_bad.n = 64;
  masked_bad.k = 64;
  Run(masked_bad, rng);
}

// A gather table of `rows` entries into `source_rows` rows by `divisor`: mostly entries in range
// (repeats included: several rows read one source row), every 17th negative and every 23rd past
// the last source row (rows of zeros).
std::vector<int32_t> GatherTable(int64_t rows, int64_t source_rows, int64_t divisor, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(source_rows * divisor - 1));
  std::vector<int32_t> table(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int32_t v = pick(rng);
    if (r % 17 == 5) v = -1 - static_cast<int32_t>(r);
    if (r % 23 == 7) v = static_cast<int32_t>(source_rows * divisor + r);
    table[static_cast<size_t>(r)] = v;
  }
  return table;
}

TEST_CASE("grouped_gemm and grouped_fp8_gemm gather A's rows through a table: every tile, repeated, negative "
          "and out-of-range entries, K past a stage's end",
          "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(20261207);
  for (DType in : {DType::kBFloat16, kFp8}) {
    ForEveryGroupedTile([&](const kiln::gemm::GemmTactic& tactic) {
      Case c;
      c.in = in;
      c.out = OutOf(in);
      c.counts = {70, 0, 131, 1, 64};
      c.n = 392;
      c.k = in == kFp8 ? 272 : 200;  // the last stage holds 16 bytes of K: units 1..7 zeros
      c.divisor = 3;
      c.source_rows = 100;
      c.gather = GatherTable(266, c.source_rows, c.divisor, rng);
      c.tactic = &tactic;
      Run(c, rng);
    });
  }
  // The call's own tactic (the heuristic's), MoE-like: 128 groups, a top-8 row map over 125
  // tokens; bf16's silu_and_mul epilogue too; one source row for all.
  for (DType in : {DType::kBFloat16, DType::kFloat16, kFp8}) {
    Case c;
    c.in = in;
    c.out = OutOf(in);
    c.counts = RandomCounts(128, 1000, rng);
    c.n = 256;
    c.k = 512;
    c.divisor = 8;
    c.source_rows = 125;
    c.gather = GatherTable(1000, c.source_rows, c.divisor, rng);
    Run(c, rng);
    if (in != kFp8) {
      c.silu_and_mul = true;
      Run(c, rng);
    }
  }
  Case one;
  one.counts = {40, 300};
  one.n = 128;
  one.k = 64;
  one.source_rows = 1;
  one.gather = std::vector<int32_t>(340, 0);
  Run(one, rng);
}

TEST_CASE("grouped_gemm_masked and grouped_fp8_gemm_masked match float64: counts of 0 and M_max, untouched rows",
          "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(31);
  for (DType in : {DType::kBFloat16, DType::kFloat16, kFp8}) {
    for (int64_t m_max : {1, 16, 129}) {
      for (int64_t e : {1, 4, 64}) {
        Case c;
        c.masked = true;
        c.in = in;
        c.out = OutOf(in);
        c.m_max = m_max;
        std::uniform_int_distribution<int64_t> pick(0, m_max);
        for (int64_t g = 0; g < e; ++g) c.counts.push_back(pick(rng));
        c.counts.front() = m_max;
        if (e > 1) c.counts.back() = 0;
        c.n = 264;
        c.k = 144;
        Run(c, rng);
      }
    }
    Case through_c;
    through_c.masked = true;
    through_c.in = in;
    through_c.out = OutOf(in);
    through_c.counts = {3, 0, 16};
    through_c.m_max = 16;
    through_c.n = 128;
    through_c.k = 128;
    through_c.c_api = true;
    Run(through_c, rng);
  }
}

}  // namespace

TEST_CASE("grouped_gemm's silu_and_mul epilogue matches float64: every tile, halves no tile divides, empty groups",
          "[gpu][gemm][moe]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(41);
  for (DType in : {DType::kBFloat16, DType::kFloat16}) {
    for (int tile_m : kiln::gemm::kTileMChoices) {
      for (int tile_n : kiln::gemm::kTileNChoices) {
        const kiln::gemm::GemmTactic tactic{tile_m, tile_n, kiln::gemm::GemmMaxStages(tile_m, tile_n, 1, true), 3, 1};
        Case c;
        c.in = in;
        c.out = in;
        c.silu_and_mul = true;
        c.counts = {70, 0, 131, 1, 64};
        c.n = 2 * 200;  // I = 200: a half no tile's half (32, 64, 96, 128) divides
        c.k = 136;
        c.tactic = &tactic;
        Run(c, rng);
      }
    }
  }
  // The call's own tactic (the heuristic's), Mixtral's and Qwen3's group counts, small widths.
  for (int64_t e : {8, 128}) {
    Case c;
    c.silu_and_mul = true;
    c.counts = RandomCounts(e, 300, rng);
    c.n = 2 * 256;
    c.k = 512;
    Run(c, rng);
  }
}
