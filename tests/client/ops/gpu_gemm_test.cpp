// [gpu][gemm] kiln::ops::gemm on a real sm_90a GPU (H100/H200; skipped visibly elsewhere)
// against a float64 CPU reference: bf16 and fp16 inputs, bf16/fp16/fp32 outputs, M 1 / 7 / 64 /
// 127 / 1000 / 4097, N and K that no tile divides, bias and beta · c (c apart and c = d), every
// tactic of the space at a small shape, padded rows and a 3-D a, the C ABI. Fresh random data
// each case, d poisoned (NaN) before each launch, the padding of d checked untouched.
//
// Tolerance per element: the output dtype's rounding (rel and abs as every op's: fp32 1e-5, fp16
// 2e-3, bf16 1.6e-2) plus fp32 accumulation of a length-K dot product, 2^-20 · Σ_k |a_k b_k|.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "client/ops/gemm/gemm_gemv.h"
#include "client/ops/gemm/gemm_launch.h"
#include "client/ops/gemm/gemm_ops.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
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

struct Case {
  DType in = DType::kBFloat16;
  DType out = DType::kBFloat16;
  int64_t m = 1, n = 8, k = 8;
  int64_t a_pad = 0;  // extra elements after each row of a (row stride k + a_pad)
  int64_t d_pad = 0;  // ... of d
  bool bias = false;
  int c_mode = 0;  // 0 none, 1 a separate c, 2 c = d (accumulate into d), 3 c with beta 0 (NaN c unread)
  double beta = 1.0;
  const kiln::gemm::GemmTactic* tactic = nullptr;  // null: the op's heuristic
  bool c_api = false;
  bool gemv_direct = false;  // kiln::client::GemmGemv, the small-M kernel whatever the switch

  std::string Describe() const {
    std::string s = std::string(kiln::DTypeName(in)) + "->" + kiln::DTypeName(out) + " m=" + std::to_string(m) +
                    " n=" + std::to_string(n) + " k=" + std::to_string(k) + " pads=" + std::to_string(a_pad) + "/" +
                    std::to_string(d_pad) + (bias ? " bias" : "") + " c_mode=" + std::to_string(c_mode) +
                    " beta=" + std::to_string(beta);
    if (tactic != nullptr) s += " tactic " + kiln::client::GemmTacticText(*tactic);
    return s + (c_api ? " (C ABI)" : "") + (gemv_direct ? " (GemmGemv)" : "");
  }
};

void Run(const Case& c, std::mt19937& rng, CUstream stream) {
  INFO(c.Describe());
  const size_t in_es = kiln::DTypeSize(c.in), out_es = kiln::DTypeSize(c.out);
  const int64_t a_stride = c.k + c.a_pad, d_stride = c.n + c.d_pad;
  HostTensor a = kiln::testing::RandomTensor(c.in, static_cast<size_t>(c.m * a_stride), rng, -1.f, 1.f);
  HostTensor b = kiln::testing::RandomTensor(c.in, static_cast<size_t>(c.n * c.k), rng, -1.f, 1.f);
  HostTensor bias = kiln::testing::RandomTensor(c.in, static_cast<size_t>(c.n), rng, -1.f, 1.f);
  HostTensor cin = kiln::testing::RandomTensor(c.out, static_cast<size_t>(c.m * d_stride), rng, -1.f, 1.f);
  if (c.c_mode == 3) std::memset(cin.bytes.data(), 0xFF, cin.bytes.size());  // NaN: must not be read

  DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dbias(bias.bytes.size()), dd(cin.bytes.size()),
      dc(cin.bytes.size());
  da.Upload(a.bytes);
  db.Upload(b.bytes);
  dbias.Upload(bias.bytes);
  dc.Upload(cin.bytes);
  if (c.c_mode == 2) dd.Upload(cin.bytes);  // d holds c before the call
  else dd.Poison();

  auto ta = TensorView::Strided(da.data(), c.in, {c.m, c.k}, {a_stride, 1});
  auto tb = TensorView::Contiguous(db.data(), c.in, {c.n, c.k});
  auto td = TensorView::Strided(dd.data(), c.out, {c.m, c.n}, {d_stride, 1});
  auto tbias = TensorView::Contiguous(dbias.data(), c.in, {c.n});
  auto tc = c.c_mode == 2 ? td : TensorView::Strided(dc.data(), c.out, {c.m, c.n}, {d_stride, 1});
  const TensorView* pbias = c.bias ? &tbias : nullptr;
  const TensorView* pc = c.c_mode != 0 ? &tc : nullptr;
  const double beta = c.c_mode == 3 ? 0.0 : c.beta;

  kiln::Status status;
  if (c.c_api) {
    DLTensor dl_d = ToDLTensor(td), dl_a = ToDLTensor(ta), dl_b = ToDLTensor(tb), dl_bias = ToDLTensor(tbias),
             dl_c = ToDLTensor(tc);
    const kiln_status rc = kiln_gemm(&dl_d, &dl_a, &dl_b, c.bias ? &dl_bias : nullptr, pc ? &dl_c : nullptr, beta,
                                     stream);
    INFO(kiln_last_error());
    REQUIRE(rc == KILN_OK);
  } else if (c.gemv_direct) {
    status = kiln::client::GemmGemv(td, ta, tb, pbias, pc, beta, stream);
  } else if (c.tactic != nullptr) {
    auto plan = kiln::client::PlanGemm(td, ta, tb, pbias, pc, beta, "gpu_gemm_test");
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    status = kiln::client::LaunchGemmPlan(*plan, *c.tactic, stream);
  } else {
    status = kiln::ops::gemm(td, ta, tb, pbias, pc, beta, stream);
  }
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuStreamSynchronize(stream));
  HostTensor d{c.out, dd.Download()};

  // Every row when there are at most 48 or the product is small enough for the CPU; else 48 rows
  // spread over m (the first and last included), every column of them.
  std::vector<int64_t> rows;
  if (c.m <= 48 || c.m * c.n * c.k <= int64_t{1} << 28) {
    for (int64_t r = 0; r < c.m; ++r) rows.push_back(r);
  } else {
    for (int i = 0; i < 48; ++i) rows.push_back(i * (c.m - 1) / 47);
  }
  const auto tol = kiln::testing::ToleranceFor(c.out);
  int64_t bad = 0;
  std::string first_bad;
  std::vector<double> arow(static_cast<size_t>(c.k));
  for (int64_t r : rows) {
    for (int64_t l = 0; l < c.k; ++l) arow[static_cast<size_t>(l)] = a.Get(static_cast<size_t>(r * a_stride + l));
    for (int64_t j = 0; j < c.n; ++j) {
      double want = 0, magnitude = 0;
      for (int64_t l = 0; l < c.k; ++l) {
        const double p = arow[static_cast<size_t>(l)] * b.Get(static_cast<size_t>(j * c.k + l));
        want += p;
        magnitude += std::fabs(p);
      }
      if (c.bias) want += bias.Get(static_cast<size_t>(j));
      if (c.c_mode == 1 || c.c_mode == 2) want += c.beta * cin.Get(static_cast<size_t>(r * d_stride + j));
      const double got = d.Get(static_cast<size_t>(r * d_stride + j));
      const kiln::testing::Tolerance t{tol.abs + std::ldexp(magnitude, -20), tol.rel};
      if (!kiln::testing::Close(got, want, t) && bad++ == 0)
        first_bad = "row " + std::to_string(r) + " col " + std::to_string(j) + ": got " + std::to_string(got) +
                    ", want " + std::to_string(want);
    }
  }
  INFO("first mismatch: " << first_bad << " (" << bad << " in all)");
  CHECK(bad == 0);
  // The padding of d: poison (0xFF bytes) unless d started as c.
  if (c.d_pad > 0) {
    int64_t touched = 0;
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t j = c.n; j < d_stride; ++j) {
        const size_t e = static_cast<size_t>(r * d_stride + j);
        const uint8_t* was = c.c_mode == 2 ? cin.bytes.data() + e * out_es : nullptr;
        for (size_t byte = 0; byte < out_es; ++byte)
          if (d.bytes[e * out_es + byte] != (was ? was[byte] : 0xFF)) ++touched;
      }
    INFO("bytes of d's row padding written");
    CHECK(touched == 0);
  }
  (void)in_es;
}

TEST_CASE("gemm matches a float64 reference over dtypes, M, N and K", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(20261202);
  CUstream stream = nullptr;
  for (DType in : {DType::kBFloat16, DType::kFloat16}) {
    for (int64_t m : {1, 7, 64, 127, 1000, 4097}) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{64, 64}, {264, 72}, {136, 520}, {4096, 4096}}) {
        Case c;
        c.in = in;
        c.out = in;
        c.m = m;
        c.n = n;
        c.k = k;
        Run(c, rng, stream);
      }
    }
  }
}

TEST_CASE("gemm writes every output dtype and adds bias and beta * c", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(7);
  for (DType in : {DType::kBFloat16, DType::kFloat16}) {
    for (DType out : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
      for (int c_mode : {0, 1, 2, 3}) {
        for (bool bias : {false, true}) {
          Case c;
          c.in = in;
          c.out = out;
          c.m = 200;
          c.n = 392;
          c.k = 200;
          c.bias = bias;
          c.c_mode = c_mode;
          c.beta = c_mode == 2 ? 1.0 : -0.5;
          c.d_pad = 8;
          Run(c, rng, nullptr);
        }
      }
    }
  }
}

// The GEMV grid at M m_first..m_last: every dtype pair, N and K of one 16-byte unit up to rows of
// many units with a partial last round of loads (K 4104 = 513 units: 4 rounds of 128 and one; for
// the mma kernels 129 steps of 32, 17 a warp, the last warp's 10 and a lane group of 3), N not a
// multiple of a block's 16 columns (the mma tile's rows past N), padded rows, bias and beta * c
// (c = d too), through kiln::ops::gemm and GemmGemv in turn; Llama-3.1-8B's qkv width at the M
// of `model_rows` (bf16 only: the CPU reference of the others would take minutes). Returns the
// cases run.
int RunGemvGrid(int64_t m_first, int64_t m_last, std::initializer_list<int64_t> model_rows, std::mt19937& rng) {
  int run = 0;
  for (DType in : {DType::kBFloat16, DType::kFloat16}) {
    for (DType out : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
      for (int64_t m = m_first; m <= m_last; ++m) {
        std::vector<std::pair<int64_t, int64_t>> shapes = {{8, 8}, {24, 72}, {1032, 4104}};
        if (in == DType::kBFloat16 && out == DType::kBFloat16 &&
            std::find(model_rows.begin(), model_rows.end(), m) != model_rows.end())
          shapes.push_back({6144, 4096});
        for (auto [n, k] : shapes) {
          Case c;
          c.in = in;
          c.out = out;
          c.m = m;
          c.n = n;
          c.k = k;
          c.gemv_direct = (run % 2) == 1;
          c.bias = (run % 3) != 0;
          c.c_mode = run % 4;
          c.beta = c.c_mode == 2 ? 1.0 : -0.5;
          c.a_pad = (run % 5 == 0) ? 8 : 0;
          c.d_pad = (run % 3 == 1) ? 8 : 0;
          Run(c, rng, nullptr);
          ++run;
        }
      }
    }
  }
  return run;
}

// gemm's small-M kernels (kiln/gemm/gemv.cuh): M 1 to 16 (the fp32 kernel at 1, the mma.sync
// kernel above: one n-tile up to 8, two above, rows past M in each), at the kernels' edges M 1, 4,
// 5, 8, 9 and 16 also at a model's width.
TEST_CASE("gemm's GEMV kernels for M <= 16 match a float64 reference", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  kiln::client::SetGemmGemvForTesting(1);  // gemm takes them whatever the default
  std::mt19937 rng(20261205);
  const int run = RunGemvGrid(1, kiln::gemm::kGemvMaxRows, {1, 4, 5, 8, 9, 16}, rng);
  kiln::client::SetGemmGemvForTesting(-1);
  CHECK(run == 2 * 3 * 16 * 3 + 6);
}

// The wide mma kernel (M 17 to 32: four n-tiles, the rows past M zero) through kiln::ops::gemm
// with KILN_GEMM_GEMV_WIDE's switch on and through GemmGemv, at every M of its range (a model's
// width at M 17, 24, 25 and 32).
TEST_CASE("gemm's wide GEMV kernel for M 17 to 32 matches a float64 reference", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  kiln::client::SetGemmGemvForTesting(1);
  kiln::client::SetGemmGemvWideForTesting(1);
  std::mt19937 rng(20261206);
  const int run = RunGemvGrid(kiln::gemm::kGemvMaxRows + 1, kiln::gemm::kGemvWideMaxRows, {17, 24, 25, 32}, rng);
  kiln::client::SetGemmGemvWideForTesting(-1);
  kiln::client::SetGemmGemvForTesting(-1);
  CHECK(run == 2 * 3 * 16 * 3 + 4);
}

TEST_CASE("gemm's GEMV kernels give the same bits every call, and refuse more than 32 rows", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(5);
  for (const int64_t m : {3, 13, 29}) {  // one row count per mma kernel
    const int64_t n = 4096, k = 14336;   // Llama-3.1-8B's down projection
    HostTensor a = kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(m * k), rng, -1.f, 1.f);
    HostTensor b = kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(n * k), rng, -1.f, 1.f);
    DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dd(static_cast<size_t>(m * n) * 2);
    da.Upload(a.bytes);
    db.Upload(b.bytes);
    auto ta = TensorView::Contiguous(da.data(), DType::kBFloat16, {m, k});
    auto tb = TensorView::Contiguous(db.data(), DType::kBFloat16, {n, k});
    auto td = TensorView::Contiguous(dd.data(), DType::kBFloat16, {m, n});
    std::vector<uint8_t> first;
    for (int call = 0; call < 3; ++call) {
      dd.Poison();
      REQUIRE(kiln::client::GemmGemv(td, ta, tb, nullptr, nullptr, 1.0, nullptr).ok());
      KILN_CU(kiln::testing::Driver().cuStreamSynchronize(nullptr));
      const std::vector<uint8_t> bytes = dd.Download();
      if (call == 0) first = bytes;
      INFO("m " << m << " call " << call);
      CHECK(bytes == first);
    }
  }
  const int64_t n = 4096, k = 14336;
  DeviceBuffer da33(static_cast<size_t>(33 * k) * 2), db(static_cast<size_t>(n * k) * 2),
      dd33(static_cast<size_t>(33 * n) * 2);
  auto ta33 = TensorView::Contiguous(da33.data(), DType::kBFloat16, {33, k});
  auto tb = TensorView::Contiguous(db.data(), DType::kBFloat16, {n, k});
  auto td33 = TensorView::Contiguous(dd33.data(), DType::kBFloat16, {33, n});
  dd33.Poison();
  const kiln::Status refused = kiln::client::GemmGemv(td33, ta33, tb, nullptr, nullptr, 1.0, nullptr);
  CHECK(refused.code() == kiln::StatusCode::kInvalidArgument);
  CHECK(refused.message().find("at most 32 rows, found 33") != std::string::npos);
  CHECK(dd33.Download() == std::vector<uint8_t>(dd33.Download().size(), 0xFF));  // nothing written
}

TEST_CASE("every tactic of the gemm space is correct at a small shape", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(11);
  int run = 0;
  for (int tile_m : kiln::gemm::kTileMChoices) {
    for (int tile_n : kiln::gemm::kTileNChoices) {
      for (int stages = kiln::gemm::kMinStages; stages <= kiln::gemm::GemmMaxStages(tile_m, tile_n); ++stages) {
        for (int group_m : {1, 3}) {
          const kiln::gemm::GemmTactic tactic{tile_m, tile_n, stages, group_m};
          Case c;
          c.m = 300;  // several tile rows and a partial one, for every tile_m
          c.n = 520;  // several tile columns and a partial one
          c.k = 456;  // 7 K steps of 64 and a partial one: the ring wraps at every stage count
          c.tactic = &tactic;
          c.bias = true;
          Run(c, rng, nullptr);
          ++run;
        }
      }
      // Split-K: every split of the tile at its fewest and most stages (K 456 is 8 K steps:
      // one per block at split 8, the last partial).
      for (int split : {2, 4, 8}) {
        const int most = kiln::gemm::GemmMaxStages(tile_m, tile_n, split);
        for (int stages : {kiln::gemm::kMinStages, most}) {
          const kiln::gemm::GemmTactic tactic{tile_m, tile_n, stages, 3, split};
          Case c;
          c.m = 300;
          c.n = 520;
          c.k = 456;
          c.tactic = &tactic;
          c.bias = true;
          Run(c, rng, nullptr);
          ++run;
        }
      }
    }
  }
  CHECK(run > 60 + 36);
}

TEST_CASE("split-K gemm: small M, blocks without K steps, many tiles per cluster, c = d", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(17);
  using kiln::gemm::GemmTactic;
  const GemmTactic narrow4{64, 128, 8, 8, 4}, narrow8{64, 128, 8, 8, 8}, wide8{64, 256, 4, 8, 8},
      small2{64, 64, 8, 8, 2}, big2{128, 256, 2, 8, 2};
  for (const GemmTactic* t : {&narrow4, &narrow8, &wide8, &small2, &big2}) {
    // Decode-like M (rows past M neither written nor read), K = 72 (2 K steps: most blocks of
    // a split 8 have none and add zeros), and a deep K.
    for (int64_t m : {1, 7, 64, 127}) {
      for (auto [n, k] : {std::pair<int64_t, int64_t>{264, 72}, {136, 520}, {1024, 4096}}) {
        Case c;
        c.m = m;
        c.n = n;
        c.k = k;
        c.tactic = t;
        c.bias = m == 7;
        c.c_mode = m == 127 ? 2 : 0;  // the residual add into d itself
        c.d_pad = 8;
        Run(c, rng, nullptr);
      }
    }
    // More tiles than clusters: each cluster walks many tiles, its barriers' phases turn over.
    Case many;
    many.m = 1000;
    many.n = 4096;
    many.k = 1024;
    many.tactic = t;
    many.c_mode = 1;
    many.beta = 0.25;
    Run(many, rng, nullptr);
  }
  // What the op does by default at decode sizes: the heuristic's tactics (the GEMV kernels at M 1
  // and 16 when KILN_GEMM_GEMV turns them on).
  for (int64_t m : {1, 16, 64}) {
    Case c;
    c.m = m;
    c.n = 4096;
    c.k = 4096;
    Run(c, rng, nullptr);
  }
}

TEST_CASE("multicast gemm: pairs of tile rows share B, odd tile rows, one K step, many pairs per cluster",
          "[gpu][gemm]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(23);
  using kiln::gemm::GemmTactic;
  int run = 0;
  for (int tile_m : kiln::gemm::kTileMChoices) {
    for (int tile_n : kiln::gemm::kTileNChoices) {
      const int most = kiln::gemm::GemmMaxStages(tile_m, tile_n, 1, false, 2);
      for (int stages : {kiln::gemm::kMinStages, most}) {
        const GemmTactic tactic{tile_m, tile_n, stages, 3, 1, 2};
        REQUIRE(kiln::gemm::GemmTacticFits(tactic));
        // M 300: an odd count of 128-row tiles (3: the last pair's second tile is past M and
        // stores nothing) and 5 of 64 rows; M 1 and 129: a pair whose second tile is empty or
        // one row; K 64: one K step; K 456: the ring wraps.
        for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{300, 520, 456}, {1, 264, 64}, {129, 136, 520}}) {
          Case c;
          c.m = m;
          c.n = n;
          c.k = k;
          c.tactic = &tactic;
          c.bias = m == 300;
          c.d_pad = 8;
          Run(c, rng, nullptr);
          ++run;
        }
      }
    }
  }
  // More pairs than clusters (each cluster walks many, its barriers' phases turn over), with
  // beta * c, and the compute-bound tile at a Llama shape.
  const GemmTactic wide{128, 256, 4, 8, 1, 2};
  Case many;
  many.m = 1000;
  many.n = 4096;
  many.k = 1024;
  many.tactic = &wide;
  many.c_mode = 1;
  many.beta = 0.25;
  Run(many, rng, nullptr);
  Case llama;
  llama.m = 4096;
  llama.n = 4096;
  llama.k = 4096;
  llama.tactic = &wide;
  Run(llama, rng, nullptr);
  // Every tile (both counts of stages, three shapes each), counted from the tile lists so a new
  // tile does not fail the count.
  CHECK(run == static_cast<int>(std::size(kiln::gemm::kTileMChoices) * std::size(kiln::gemm::kTileNChoices)) * 2 * 3);
}

TEST_CASE("gemm's TMA-store epilogue: where D suits it, and the consumers' own stores where not, give the same bits",
          "[gpu][gemm]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(31);
  using kiln::gemm::GemmTactic;
  // Tiles with the staging buffers (128 x 256 at 4 stages, 128 x 128 at 6, 64 x 256 at 5, 64 x 64)
  // and one without (128 x 128 at 7): every output dtype, bias, rows past M and columns past N
  // clipped, d's row padding untouched (d_pad 8: rows 16-byte multiples apart, the TMA path;
  // d_pad 2: not, the consumers' stores), and beta * c (always the consumers' stores).
  const GemmTactic tactics[] = {{128, 256, 4, 8}, {128, 128, 6, 8}, {64, 256, 5, 8}, {64, 64, 8, 8}, {128, 128, 7, 8}};
  CHECK(kiln::gemm::GemmHasStoreStaging(128, 256, 4, 1, false, 1));
  CHECK(kiln::gemm::GemmHasStoreStaging(128, 128, 6, 1, false, 1));
  CHECK(!kiln::gemm::GemmHasStoreStaging(128, 128, 7, 1, false, 1));
  for (const GemmTactic& tactic : tactics) {
    for (kiln::DType out : {kiln::DType::kBFloat16, kiln::DType::kFloat16, kiln::DType::kFloat32}) {
      for (int64_t d_pad : {8, 2}) {
        Case c;
        c.m = 300;
        c.n = 520;
        c.k = 456;
        c.out = out;
        c.tactic = &tactic;
        c.bias = true;
        c.d_pad = d_pad;
        Run(c, rng, nullptr);
      }
    }
    Case with_c;
    with_c.m = 129;
    with_c.n = 264;
    with_c.k = 72;
    with_c.tactic = &tactic;
    with_c.c_mode = 1;
    with_c.beta = 0.5;
    with_c.d_pad = 8;
    Run(with_c, rng, nullptr);
  }
  // The same product stored both ways: bit for bit the same values.
  const int64_t m = 515, n = 1032, k = 392;
  HostTensor a = kiln::testing::RandomTensor(kiln::DType::kBFloat16, static_cast<size_t>(m * k), rng, -1.f, 1.f);
  HostTensor b = kiln::testing::RandomTensor(kiln::DType::kBFloat16, static_cast<size_t>(n * k), rng, -1.f, 1.f);
  DeviceBuffer da(a.bytes.size()), db(b.bytes.size());
  da.Upload(a.bytes);
  db.Upload(b.bytes);
  auto ta = TensorView::Contiguous(da.data(), kiln::DType::kBFloat16, {m, k});
  auto tb = TensorView::Contiguous(db.data(), kiln::DType::kBFloat16, {n, k});
  std::vector<std::vector<uint8_t>> rows_of;
  for (int64_t stride : {n, n + 2}) {  // 2064 bytes a row: TMA; 2068: not a multiple of 16
    DeviceBuffer dd(static_cast<size_t>(m * stride * 2));
    dd.Poison();
    auto td = TensorView::Strided(dd.data(), kiln::DType::kBFloat16, {m, n}, {stride, 1});
    auto plan = kiln::client::PlanGemm(td, ta, tb, nullptr, nullptr, 0, "gpu_gemm_test");
    REQUIRE(plan.ok());
    REQUIRE(kiln::client::LaunchGemmPlan(*plan, GemmTactic{128, 256, 4, 8}, nullptr).ok());
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    const std::vector<uint8_t> all = dd.Download();
    std::vector<uint8_t> dense;
    for (int64_t r = 0; r < m; ++r)
      dense.insert(dense.end(), all.begin() + r * stride * 2, all.begin() + (r * stride + n) * 2);
    rows_of.push_back(std::move(dense));
  }
  CHECK(rows_of[0] == rows_of[1]);
}

TEST_CASE("multicast gemm is deterministic and equal to the same tile without multicast", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(29);
  const int64_t m = 777, n = 1032, k = 1000;
  HostTensor a = kiln::testing::RandomTensor(kiln::DType::kBFloat16, static_cast<size_t>(m * k), rng, -1.f, 1.f);
  HostTensor b = kiln::testing::RandomTensor(kiln::DType::kBFloat16, static_cast<size_t>(n * k), rng, -1.f, 1.f);
  DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dd(static_cast<size_t>(m * n * 4));
  da.Upload(a.bytes);
  db.Upload(b.bytes);
  auto ta = TensorView::Contiguous(da.data(), kiln::DType::kBFloat16, {m, k});
  auto tb = TensorView::Contiguous(db.data(), kiln::DType::kBFloat16, {n, k});
  auto td = TensorView::Contiguous(dd.data(), kiln::DType::kFloat32, {m, n});
  auto plan = kiln::client::PlanGemm(td, ta, tb, nullptr, nullptr, 0, "gpu_gemm_test");
  REQUIRE(plan.ok());
  // The same tile and K order with and without multicast: each output is the same sum of the
  // same products in the same order, so the bits agree (fp32 out: no rounding hides a difference).
  std::vector<uint8_t> first;
  for (int multicast : {1, 2, 2}) {
    const kiln::gemm::GemmTactic tactic{128, 128, 5, 8, 1, multicast};
    dd.Poison();
    REQUIRE(kiln::client::LaunchGemmPlan(*plan, tactic, nullptr).ok());
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    std::vector<uint8_t> bits = dd.Download();
    if (first.empty()) first = bits;
    INFO("multicast " << multicast);
    CHECK(bits == first);
  }
}

TEST_CASE("split-K gemm is deterministic: the same call gives the same bits", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(23);
  const int64_t m = 33, n = 2048, k = 4096;
  HostTensor a = kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(m * k), rng, -1.f, 1.f);
  HostTensor b = kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(n * k), rng, -1.f, 1.f);
  DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dd(static_cast<size_t>(m * n * 4));
  da.Upload(a.bytes);
  db.Upload(b.bytes);
  auto ta = TensorView::Contiguous(da.data(), DType::kBFloat16, {m, k});
  auto tb = TensorView::Contiguous(db.data(), DType::kBFloat16, {n, k});
  auto td = TensorView::Contiguous(dd.data(), DType::kFloat32, {m, n});
  auto plan = kiln::client::PlanGemm(td, ta, tb, nullptr, nullptr, 1.0, "determinism");
  REQUIRE(plan.ok());
  for (int split : {2, 4, 8}) {
    const kiln::gemm::GemmTactic tactic{64, 128, 8, 8, split};
    std::vector<uint8_t> first;
    for (int run = 0; run < 20; ++run) {
      dd.Poison();
      REQUIRE(kiln::client::LaunchGemmPlan(*plan, tactic, nullptr).ok());
      KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
      const std::vector<uint8_t> now = dd.Download();
      if (run == 0) first = now;
      INFO("split " << split << " run " << run);
      CHECK(now == first);
    }
  }
}

// Launched as programmatic dependents (KILN_GEMM_PDL=1, forced on here), the gemm kernels may
// start while the previous kernel runs and wait (griddepcontrol.wait) before touching memory. A chain that ping-pongs
// between two buffers, x1 = x0 . w0^T into buffer 1, x2 = x1 . w1^T into buffer 0, ..., has both
// hazards the wait must stop: a call reads what the call before it wrote, and overwrites what
// the call before it read. Run back to back on one stream (and replayed from a CUDA graph), with
// tactics of every launch shape (plain, split-K clusters, multicast clusters), the result must
// be bit-identical to the same calls each after a full synchronization.
TEST_CASE("gemm launched back to back as programmatic dependents reads and overwrites only finished work",
          "[gpu][gemm]") {
  GpuSession session = HopperSession();
  const auto& driver = kiln::testing::Driver();
  kiln::client::SetGemmProgrammaticLaunchForTesting(1);
  struct Restore {
    ~Restore() { kiln::client::SetGemmProgrammaticLaunchForTesting(-1); }
  } restore;
  REQUIRE(kiln::client::GemmProgrammaticLaunch());
  std::mt19937 rng(41);
  const int64_t m = 1536, k = 2048;  // n = k: the output of a call is the next call's a
  constexpr int kCalls = 12;
  // |w| <= sqrt(3 / k): each call keeps the values' scale (uniform inputs, variance about kept).
  const float bound = std::sqrt(3.0f / static_cast<float>(k));
  HostTensor x0 = kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(m * k), rng, -1.f, 1.f);
  std::vector<std::unique_ptr<DeviceBuffer>> weights;
  for (int i = 0; i < 3; ++i) {
    weights.push_back(std::make_unique<DeviceBuffer>(static_cast<size_t>(k * k * 2)));
    weights.back()->Upload(
        kiln::testing::RandomTensor(DType::kBFloat16, static_cast<size_t>(k * k), rng, -bound, bound).bytes);
  }
  DeviceBuffer buffers[2] = {DeviceBuffer(x0.bytes.size()), DeviceBuffer(x0.bytes.size())};
  const kiln::gemm::GemmTactic tactics[] = {
      {128, 256, kiln::gemm::GemmMaxStages(128, 256, 1), 8, 1, 1},
      {64, 128, kiln::gemm::GemmMaxStages(64, 128, 2), 8, 2, 1},
      {128, 128, kiln::gemm::GemmMaxStages(128, 128, 1, false, 2), 8, 1, 2},
      {64, 256, kiln::gemm::GemmMaxStages(64, 256, 4), 8, 4, 1},
  };
  auto view = [&](int buffer) { return TensorView::Contiguous(buffers[buffer].data(), DType::kBFloat16, {m, k}); };
  // Call i: buffer i % 2 times weight i % 3 into buffer (i + 1) % 2, tactic i % 4.
  auto call = [&](int i, CUstream stream) {
    const TensorView a = view(i % 2), d = view((i + 1) % 2);
    const TensorView w = TensorView::Contiguous(weights[static_cast<size_t>(i % 3)]->data(), DType::kBFloat16, {k, k});
    auto plan = kiln::client::PlanGemm(d, a, w, nullptr, nullptr, 0, "pdl chain");
    REQUIRE(plan.ok());
    return kiln::client::LaunchGemmPlan(*plan, tactics[i % 4], stream);
  };
  CUstream stream = nullptr;
  KILN_CU(driver.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  auto reset = [&] {
    buffers[0].Upload(x0.bytes);
    buffers[1].Poison();
  };
  reset();
  for (int i = 0; i < kCalls; ++i) {
    REQUIRE(call(i, stream).ok());
    KILN_CU(driver.cuStreamSynchronize(stream));
  }
  const std::vector<uint8_t> want = buffers[kCalls % 2].Download();
  {
    HostTensor out{DType::kBFloat16, want};
    size_t finite = 0;
    for (size_t e = 0; e < static_cast<size_t>(m * k); ++e) finite += std::isfinite(out.Get(e)) ? 1 : 0;
    INFO("the chain's values stay finite (the weights keep their scale)");
    REQUIRE(finite == static_cast<size_t>(m * k));
  }
  for (int round = 0; round < 5; ++round) {
    reset();
    for (int i = 0; i < kCalls; ++i) REQUIRE(call(i, stream).ok());
    KILN_CU(driver.cuStreamSynchronize(stream));
    INFO("back to back on one stream, round " << round);
    CHECK(buffers[kCalls % 2].Download() == want);
  }
  CUgraph graph = nullptr;
  KILN_CU(driver.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  bool captured = true;
  for (int i = 0; i < kCalls; ++i) captured = captured && call(i, stream).ok();
  KILN_CU(driver.cuStreamEndCapture(stream, &graph));
  REQUIRE(captured);
  CUgraphExec exec = nullptr;
  KILN_CU(driver.cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (int replay = 0; replay < 5; ++replay) {
    reset();
    KILN_CU(driver.cuGraphLaunch(exec, stream));
    KILN_CU(driver.cuStreamSynchronize(stream));
    INFO("CUDA graph replay " << replay);
    CHECK(buffers[kCalls % 2].Download() == want);
  }
  KILN_CU(driver.cuGraphExecDestroy(exec));
  KILN_CU(driver.cuGraphDestroy(graph));
  KILN_CU(driver.cuStreamDestroy(stream));
}

TEST_CASE("gemm takes padded rows, a 3-D a and the C ABI", "[gpu][gemm][capi]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(3);
  Case padded;
  padded.m = 129;
  padded.n = 256;
  padded.k = 128;
  padded.a_pad = 24;
  padded.d_pad = 6;
  Run(padded, rng, nullptr);
  Case through_c = padded;
  through_c.c_api = true;
  through_c.bias = true;
  through_c.c_mode = 1;
  Run(through_c, rng, nullptr);

  // a [2, 3, 64] flattens into 6 rows; d [2, 3, 16].
  HostTensor a = kiln::testing::RandomTensor(DType::kBFloat16, 2 * 3 * 64, rng, -1.f, 1.f);
  HostTensor b = kiln::testing::RandomTensor(DType::kBFloat16, 16 * 64, rng, -1.f, 1.f);
  DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dd(2 * 3 * 16 * 2);
  da.Upload(a.bytes);
  db.Upload(b.bytes);
  dd.Poison();
  auto ta = TensorView::Contiguous(da.data(), DType::kBFloat16, {2, 3, 64});
  auto tb = TensorView::Contiguous(db.data(), DType::kBFloat16, {16, 64});
  auto td = TensorView::Contiguous(dd.data(), DType::kBFloat16, {2, 3, 16});
  REQUIRE(kiln::ops::gemm(td, ta, tb).ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  HostTensor d{DType::kBFloat16, dd.Download()};
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < 16; ++j) {
      double want = 0;
      for (int l = 0; l < 64; ++l)
        want += a.Get(static_cast<size_t>(r * 64 + l)) * b.Get(static_cast<size_t>(j * 64 + l));
      CHECK(kiln::testing::Close(d.Get(static_cast<size_t>(r * 16 + j)), want,
                                 kiln::testing::ToleranceFor(DType::kBFloat16)));
    }
}

TEST_CASE("gemm refuses misaligned operands on a real device and writes nothing", "[gpu][gemm]") {
  GpuSession session = HopperSession();
  DeviceBuffer da(64 * 64 * 2 + 64), db(64 * 64 * 2), dd(64 * 64 * 2);
  dd.Poison();
  // a moved by one element: 2-byte aligned, not 16 (TMA).
  auto ta = TensorView::Contiguous(da.data() + 2, DType::kBFloat16, {64, 64});
  auto tb = TensorView::Contiguous(db.data(), DType::kBFloat16, {64, 64});
  auto td = TensorView::Contiguous(dd.data(), DType::kBFloat16, {64, 64});
  const kiln::Status s = kiln::ops::gemm(td, ta, tb);
  REQUIRE(!s.ok());
  CHECK(s.code() == kiln::StatusCode::kInvalidArgument);
  CHECK(s.message().find("kiln::ops::gemm: a: data pointer") != std::string::npos);
  CHECK(s.message().find("is not 16-byte aligned (TMA reads it)") != std::string::npos);
  const std::vector<uint8_t> after = dd.Download();
  CHECK(std::all_of(after.begin(), after.end(), [](uint8_t v) { return v == 0xFF; }));
}

// Not a test: the host cost of what every gemm call does before its launch, to decide whether
// the TMA tensor maps should be cached (issue 11: "encoded per call or cached per
// pointer/shape: measure which"): cuTensorMapEncodeTiled alone, and a whole kiln::ops::gemm
// call at M = 1 (validation, tactic, two encodes, the launch), each timed over 20000 calls on
// the host clock. Run with "[.gemm-host-bench]".
TEST_CASE("gemm host cost per call: tensor map encoding and the whole call", "[.gemm-host-bench]") {
  GpuSession session = HopperSession();
  const auto& driver = kiln::testing::Driver();
  DeviceBuffer da(1 * 4096 * 2), db(6144 * 4096 * 2), dd(1 * 6144 * 2);
  CUtensorMap map;
  const cuuint64_t dims[2] = {4096, 6144};
  const cuuint64_t strides[1] = {4096 * 2};
  const cuuint32_t box[2] = {64, 64};
  const cuuint32_t element_strides[2] = {1, 1};
  constexpr int kCalls = 20000;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    KILN_CU(driver.cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, db.data(), dims, strides, box,
                                          element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  }
  const double encode_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
                           kCalls;
  auto ta = TensorView::Contiguous(da.data(), DType::kBFloat16, {1, 4096});
  auto tb = TensorView::Contiguous(db.data(), DType::kBFloat16, {6144, 4096});
  auto td = TensorView::Contiguous(dd.data(), DType::kBFloat16, {1, 6144});
  REQUIRE(kiln::ops::gemm(td, ta, tb).ok());  // the kernel loaded
  KILN_CU(driver.cuCtxSynchronize());
  double call_us = 0;
  for (int round = 0; round < 5; ++round) {  // in rounds of 2000, synchronizing between them
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls / 5 / 5; ++i) REQUIRE(kiln::ops::gemm(td, ta, tb).ok());
    call_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    KILN_CU(driver.cuCtxSynchronize());
  }
  call_us /= kCalls / 5;
  std::printf("cuTensorMapEncodeTiled: %.3f us per call (%d calls); kiln::ops::gemm 1x6144x4096 host time: %.3f us "
              "per call (%d calls, two encodes included)\n",
              encode_us, kCalls, call_us, kCalls / 5);
  CHECK(encode_us > 0);
}

}  // namespace
