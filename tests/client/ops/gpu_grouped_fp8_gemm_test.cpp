// [gpu][gemm][fp8] kiln::ops::grouped_fp8_gemm and grouped_fp8_gemm_masked on a real sm_90a GPU
// (skipped visibly elsewhere) against the float64 product of the dequantized matrices per
// group: empty groups, groups of one row and of several tiles, N and K that no tile or scale
// block divides (several scale blocks per group along N), 1 to 128 groups, every tile forced,
// masked counts of 0 and M_max, rows outside the groups untouched and nothing written past d,
// fp32 out, the C ABI. Fresh random data and scales each case, d poisoned before each launch.
// Tolerance as gpu_fp8_gemm_test.cpp's: d's rounding plus 2^-12 of the block terms' magnitude.
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
int64_t Blocks(int64_t extent) { return (extent + 127) / 128; }

struct Case {
  bool masked = false;
  DType out = DType::kBFloat16;
  std::vector<int64_t> counts;  // rows of each group (masked: the valid rows)
  int64_t m_max = 0;            // masked
  int64_t n = 8, k = 16;
  const kiln::gemm::GemmTactic* tactic = nullptr;
  bool c_api = false;

  std::string Describe() const {
    std::string s = std::string(masked ? "masked" : "contiguous") + " fp8->" + kiln::DTypeName(out) +
                    " E=" + std::to_string(counts.size()) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                    (masked ? " m_max=" + std::to_string(m_max) : "") + " counts";
    for (size_t i = 0; i < counts.size() && i < 12; ++i) s += " " + std::to_string(counts[i]);
    if (tactic != nullptr) s += " tile " + std::to_string(tactic->tile_m) + "x" + std::to_string(tactic->tile_n);
    return s + (c_api ? " (C ABI)" : "");
  }
};

std::vector<uint8_t> Bytes(const std::vector<int32_t>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

void Run(const Case& c, std::mt19937& rng) {
  INFO(c.Describe());
  const int64_t e = static_cast<int64_t>(c.counts.size()), kb = Blocks(c.k), nb = Blocks(c.n);
  std::vector<int32_t> table;
  std::vector<std::pair<int64_t, int64_t>> span(static_cast<size_t>(e));  // each group's [first, end) rows
  int64_t rows = 0;
  if (c.masked) {
    rows = e * c.m_max;
    for (int64_t g = 0; g < e; ++g) {
      table.push_back(static_cast<int32_t>(c.counts[static_cast<size_t>(g)]));
      span[static_cast<size_t>(g)] = {g * c.m_max, g * c.m_max + c.counts[static_cast<size_t>(g)]};
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
  const size_t arows = static_cast<size_t>(std::max<int64_t>(rows, 1));
  HostTensor a = kiln::testing::RandomTensor(kFp8, arows * static_cast<size_t>(c.k), rng, -1.f, 1.f);
  HostTensor b = kiln::testing::RandomTensor(kFp8, static_cast<size_t>(e * c.n * c.k), rng, -1.f, 1.f);
  HostTensor sa = kiln::testing::RandomTensor(DType::kFloat32, arows * static_cast<size_t>(kb), rng, 0.25f, 4.f);
  HostTensor sb = kiln::testing::RandomTensor(DType::kFloat32, static_cast<size_t>(e * nb * kb), rng, 0.25f, 4.f);
  // d with 64 guard rows after it: a write outside d lands there.
  const size_t d_bytes = static_cast<size_t>(rows * c.n) * out_es, guard = static_cast<size_t>(64 * c.n) * out_es;
  DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dsa(sa.bytes.size()), dsb(sb.bytes.size()), dd(d_bytes + guard),
      dtable(table.size() * 4 + 4);
  da.Upload(a.bytes);
  db.Upload(b.bytes);
  dsa.Upload(sa.bytes);
  dsb.Upload(sb.bytes);
  dd.Poison();
  dtable.Upload(Bytes(table));

  const auto ta = c.masked ? TensorView::Contiguous(da.data(), kFp8, {e, c.m_max, c.k})
                           : TensorView::Contiguous(da.data(), kFp8, {rows, c.k});
  const auto tsa = c.masked ? TensorView::Contiguous(dsa.data(), DType::kFloat32, {e, c.m_max, kb})
                            : TensorView::Contiguous(dsa.data(), DType::kFloat32, {rows, kb});
  const auto tb = TensorView::Contiguous(db.data(), kFp8, {e, c.n, c.k});
  const auto tsb = TensorView::Contiguous(dsb.data(), DType::kFloat32, {e, nb, kb});
  const auto td = c.masked ? TensorView::Contiguous(dd.data(), c.out, {e, c.m_max, c.n})
                           : TensorView::Contiguous(dd.data(), c.out, {rows, c.n});
  const auto tt = TensorView::Contiguous(dtable.data(), DType::kInt32, {static_cast<int64_t>(table.size())});
  kiln::Status status;
  if (c.c_api) {
    DLTensor dl_d = ToDLTensor(td), dl_a = ToDLTensor(ta), dl_b = ToDLTensor(tb), dl_sa = ToDLTensor(tsa),
             dl_sb = ToDLTensor(tsb), dl_t = ToDLTensor(tt);
    const kiln_status rc = c.masked ? kiln_grouped_fp8_gemm_masked(&dl_d, &dl_a, &dl_b, &dl_sa, &dl_sb, &dl_t, nullptr)
                                    : kiln_grouped_fp8_gemm(&dl_d, &dl_a, &dl_b, &dl_sa, &dl_sb, &dl_t, nullptr);
    INFO(kiln_last_error());
    REQUIRE(rc == KILN_OK);
  } else if (c.tactic != nullptr) {
    auto plan = c.masked ? kiln::client::PlanGroupedFp8GemmMasked(td, ta, tb, tsa, tsb, tt, "test")
                         : kiln::client::PlanGroupedFp8Gemm(td, ta, tb, tsa, tsb, tt, "test");
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    status = kiln::client::LaunchGroupedGemmPlan(*plan, *c.tactic, nullptr);
  } else {
    status = c.masked ? kiln::ops::grouped_fp8_gemm_masked(td, ta, tb, tsa, tsb, tt)
                      : kiln::ops::grouped_fp8_gemm(td, ta, tb, tsa, tsb, tt);
  }
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  const std::vector<uint8_t> all = dd.Download();
  HostTensor d{c.out, std::vector<uint8_t>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(d_bytes))};

  std::vector<int64_t> group_of(static_cast<size_t>(rows), -1);
  for (int64_t g = 0; g < e; ++g)
    for (int64_t r = span[static_cast<size_t>(g)].first; r < span[static_cast<size_t>(g)].second; ++r)
      group_of[static_cast<size_t>(r)] = g;
  const auto tol = kiln::testing::ToleranceFor(c.out);
  int64_t bad = 0, touched = 0;
  std::string first_bad;
  std::vector<double> arow(static_cast<size_t>(c.k));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = group_of[static_cast<size_t>(r)];
    if (g < 0) {
      for (int64_t j = 0; j < c.n; ++j)
        for (size_t byte = 0; byte < out_es; ++byte)
          touched += d.bytes[static_cast<size_t>(r * c.n + j) * out_es + byte] != 0xFF;
      continue;
    }
    for (int64_t l = 0; l < c.k; ++l)
      arow[static_cast<size_t>(l)] = a.Get(static_cast<size_t>(r * c.k + l)) *
                                     sa.Get(static_cast<size_t>(r * kb + l / 128));
    for (int64_t j = 0; j < c.n; ++j) {
      double want = 0, magnitude = 0;
      for (int64_t l = 0; l < c.k; ++l) {
        const double p = arow[static_cast<size_t>(l)] * b.Get(static_cast<size_t>((g * c.n + j) * c.k + l)) *
                         sb.Get(static_cast<size_t>((g * nb + j / 128) * kb + l / 128));
        want += p;
        magnitude += std::fabs(p);
      }
      const double got = d.Get(static_cast<size_t>(r * c.n + j));
      if (!kiln::testing::Close(got, want, {tol.abs + std::ldexp(magnitude, -12), tol.rel}) && bad++ == 0)
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

TEST_CASE("grouped_fp8_gemm matches the dequantized float64 product: empty and one-row groups, 1..128 groups",
          "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(20261205);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{136, 144}, {264, 528}, {512, 256}}) {
    for (const std::vector<int64_t>& counts :
         std::vector<std::vector<int64_t>>{{1}, {300}, {0, 1, 0, 200, 1, 0, 129}, {0, 0, 0}}) {
      Case c;
      c.counts = counts;
      c.n = n;
      c.k = k;
      Run(c, rng);
    }
    Case many;
    many.counts = RandomCounts(128, 1000, rng);
    many.n = n;
    many.k = k;
    Run(many, rng);
  }
  Case fp32;
  fp32.out = DType::kFloat32;
  fp32.counts = {5, 0, 77};
  fp32.n = 392;
  fp32.k = 400;
  Run(fp32, rng);
  fp32.c_api = true;
  Run(fp32, rng);
}

TEST_CASE("grouped fp8: every tile is correct in both layouts", "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(37);
  for (bool masked : {false, true}) {
    for (int tile_m : kiln::gemm::kTileMChoices) {
      for (int tile_n : kiln::gemm::kTileNChoices) {
        const kiln::gemm::GemmTactic tactic{tile_m, tile_n, kiln::gemm::GemmMaxStages(tile_m, tile_n, 1, true), 3, 1};
        Case c;
        c.masked = masked;
        c.counts = masked ? std::vector<int64_t>{0, 70, 130, 1} : std::vector<int64_t>{70, 0, 131, 1, 64};
        c.m_max = 130;
        c.n = 392;
        c.k = 400;
        c.tactic = &tactic;
        Run(c, rng);
      }
    }
  }
}

TEST_CASE("grouped_fp8_gemm_masked matches float64: counts of 0 and M_max, untouched rows", "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(41);
  for (int64_t m_max : {1, 16, 129}) {
    for (int64_t e : {1, 4, 64}) {
      Case c;
      c.masked = true;
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
  through_c.counts = {3, 0, 16};
  through_c.m_max = 16;
  through_c.n = 128;
  through_c.k = 128;
  through_c.c_api = true;
  Run(through_c, rng);
}

}  // namespace
