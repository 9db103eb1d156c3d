// [gpu][gemm] kiln::ops::fp8_gemm on a real sm_90a GPU (H100/H200; skipped visibly elsewhere)
// against the float64 product of the dequantized matrices: bf16 and fp32 outputs, M 1 / 7 / 64
// / 127 / 1000 / 4097, N and K that no tile or scale block divides, padded rows of a, d and the
// scales, a 3-D a, every tile of fp8_gemm's space (fewest and most stages) at a small shape, the
// small-M GEMV kernel (M 1 to 16, each k-part count, the same bits every call), the C ABI; and the
// error of the block-scaled product measured against a bf16 GEMM's on the same data. Fresh
// random data each case (scales too), d poisoned (NaN) before each launch, d's padding checked
// untouched.
//
// Tolerance per element: the output dtype's rounding (as every op's) plus the tensor cores'
// sums of one 128-wide K block, which keep fewer bits than fp32 (DeepSeek-V3 reports about 14 on
// Hopper): 2^-12 · Σ_k |a_k sa · b_k sb|. The error test below measures the real figure.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <random>
#include <vector>

#include "client/ops/gemm/fp8_gemm_gemv.h"
#include "client/ops/gemm/fp8_gemm_ops.h"
#include "client/ops/gemm/fp8_gemm_plan.h"
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

constexpr DType kFp8 = DType::kFloat8E4M3;

struct Case {
  DType out = DType::kBFloat16;
  int64_t m = 1, n = 8, k = 16;
  int64_t a_pad = 0;      // extra elements after each row of a (a multiple of 16)
  int64_t d_pad = 0;      // ... of d
  int64_t scale_pad = 0;  // ... of a_scales and b_scales
  bool three_d = false;   // a, a_scales and d as [2, m / 2, ...]
  bool power_of_two_scales = false;
  const kiln::gemm::GemmTactic* tactic = nullptr;  // null: the op's heuristic
  bool c_api = false;
  bool gemv = false;  // kiln::client::Fp8GemmGemv: the small-M kernel whatever the switch says

  std::string Describe() const {
    std::string s = std::string("fp8->") + kiln::DTypeName(out) + " m=" + std::to_string(m) +
                    " n=" + std::to_string(n) + " k=" + std::to_string(k) + " pads=" + std::to_string(a_pad) + "/" +
                    std::to_string(d_pad) + "/" + std::to_string(scale_pad) + (three_d ? " 3-D" : "");
    if (tactic != nullptr) s += " tactic " + kiln::client::GemmTacticText(*tactic);
    return s + (c_api ? " (C ABI)" : "") + (gemv ? " (Fp8GemmGemv)" : "");
  }
};

// The float64 product of the dequantized inputs and Σ|terms| per element, for the rows checked.
struct Expected {
  std::vector<int64_t> rows;
  std::vector<double> value, magnitude;  // [rows.size() * n]
};

struct Inputs {
  HostTensor a, b, sa, sb;
  int64_t a_stride, s_stride, kb, nb;
};

Inputs Draw(const Case& c, std::mt19937& rng) {
  Inputs in;
  in.a_stride = c.k + c.a_pad;
  in.kb = kiln::gemm::Fp8ScaleBlocks(c.k);
  in.nb = kiln::gemm::Fp8ScaleBlocks(c.n);
  in.s_stride = in.kb + c.scale_pad;
  in.a = kiln::testing::RandomTensor(kFp8, static_cast<size_t>(c.m * in.a_stride), rng, -1.f, 1.f);
  in.b = kiln::testing::RandomTensor(kFp8, static_cast<size_t>(c.n * c.k), rng, -1.f, 1.f);
  in.sa = kiln::testing::RandomTensor(DType::kFloat32, static_cast<size_t>(c.m * in.s_stride), rng, 0.25f, 4.f);
  in.sb = kiln::testing::RandomTensor(DType::kFloat32, static_cast<size_t>(in.nb * in.s_stride), rng, 0.25f, 4.f);
  if (c.power_of_two_scales) {  // dequantized values then exact in bf16 too
    for (HostTensor* s : {&in.sa, &in.sb})
      for (size_t i = 0; i < s->size(); ++i) s->Set(i, std::exp2(std::round(std::log2(s->Get(i)))));
  }
  return in;
}

Expected Reference(const Case& c, const Inputs& in) {
  Expected e;
  // Every row when the product is small enough for the CPU; else 48 rows spread over m.
  if (c.m * c.n * c.k <= int64_t{1} << 28) {
    for (int64_t r = 0; r < c.m; ++r) e.rows.push_back(r);
  } else {
    for (int i = 0; i < 48; ++i) e.rows.push_back(i * (c.m - 1) / 47);
  }
  std::vector<double> bt(static_cast<size_t>(c.n * c.k));
  for (int64_t j = 0; j < c.n; ++j)
    for (int64_t l = 0; l < c.k; ++l)
      bt[static_cast<size_t>(j * c.k + l)] = in.b.Get(static_cast<size_t>(j * c.k + l)) *
                                             in.sb.Get(static_cast<size_t>((j / 128) * in.s_stride + l / 128));
  std::vector<double> arow(static_cast<size_t>(c.k));
  for (int64_t r : e.rows) {
    for (int64_t l = 0; l < c.k; ++l)
      arow[static_cast<size_t>(l)] = in.a.Get(static_cast<size_t>(r * in.a_stride + l)) *
                                     in.sa.Get(static_cast<size_t>(r * in.s_stride + l / 128));
    for (int64_t j = 0; j < c.n; ++j) {
      double want = 0, magnitude = 0;
      const double* bj = &bt[static_cast<size_t>(j * c.k)];
      for (int64_t l = 0; l < c.k; ++l) {
        const double p = arow[static_cast<size_t>(l)] * bj[l];
        want += p;
        magnitude += std::fabs(p);
      }
      e.value.push_back(want);
      e.magnitude.push_back(magnitude);
    }
  }
  return e;
}

// Runs the case; returns d (row stride n + d_pad).
HostTensor Launch(const Case& c, const Inputs& in) {
  const int64_t d_stride = c.n + c.d_pad;
  DeviceBuffer da(in.a.bytes.size()), db(in.b.bytes.size()), dsa(in.sa.bytes.size()), dsb(in.sb.bytes.size()),
      dd(static_cast<size_t>(c.m * d_stride) * kiln::DTypeSize(c.out));
  da.Upload(in.a.bytes);
  db.Upload(in.b.bytes);
  dsa.Upload(in.sa.bytes);
  dsb.Upload(in.sb.bytes);
  dd.Poison();
  TensorView ta, tsa, td;
  if (c.three_d) {
    ta = TensorView::Strided(da.data(), kFp8, {2, c.m / 2, c.k}, {c.m / 2 * in.a_stride, in.a_stride, 1});
    tsa = TensorView::Strided(dsa.data(), DType::kFloat32, {2, c.m / 2, in.kb},
                              {c.m / 2 * in.s_stride, in.s_stride, 1});
    td = TensorView::Strided(dd.data(), c.out, {2, c.m / 2, c.n}, {c.m / 2 * d_stride, d_stride, 1});
  } else {
    ta = TensorView::Strided(da.data(), kFp8, {c.m, c.k}, {in.a_stride, 1});
    tsa = TensorView::Strided(dsa.data(), DType::kFloat32, {c.m, in.kb}, {in.s_stride, 1});
    td = TensorView::Strided(dd.data(), c.out, {c.m, c.n}, {d_stride, 1});
  }
  const auto tb = TensorView::Contiguous(db.data(), kFp8, {c.n, c.k});
  const auto tsb = TensorView::Strided(dsb.data(), DType::kFloat32, {in.nb, in.kb}, {in.s_stride, 1});
  kiln::Status status;
  if (c.c_api) {
    DLTensor dl_d = ToDLTensor(td), dl_a = ToDLTensor(ta), dl_b = ToDLTensor(tb), dl_sa = ToDLTensor(tsa),
             dl_sb = ToDLTensor(tsb);
    const kiln_status rc = kiln_fp8_gemm(&dl_d, &dl_a, &dl_b, &dl_sa, &dl_sb, nullptr);
    INFO(kiln_last_error());
    REQUIRE(rc == KILN_OK);
  } else if (c.gemv) {
    status = kiln::client::Fp8GemmGemv(td, ta, tb, tsa, tsb, nullptr);
  } else if (c.tactic != nullptr) {
    auto plan = kiln::client::PlanFp8Gemm(td, ta, tb, tsa, tsb, "gpu_fp8_gemm_test");
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    status = kiln::client::LaunchFp8GemmPlan(*plan, *c.tactic, nullptr);
  } else {
    status = kiln::ops::fp8_gemm(td, ta, tb, tsa, tsb);
  }
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  return HostTensor{c.out, dd.Download()};
}

// The GEMV path off for a scope (KILN_FP8_GEMM_GEMV=0's effect): fp8_gemm runs its tile kernel at
// every M.
struct Fp8GemvOff {
  Fp8GemvOff() { kiln::client::SetFp8GemmGemvForTesting(0); }
  ~Fp8GemvOff() { kiln::client::SetFp8GemmGemvForTesting(-1); }
  Fp8GemvOff(const Fp8GemvOff&) = delete;
  Fp8GemvOff& operator=(const Fp8GemvOff&) = delete;
};

void Run(const Case& c, std::mt19937& rng) {
  INFO(c.Describe());
  const Inputs in = Draw(c, rng);
  const HostTensor d = Launch(c, in);
  const Expected e = Reference(c, in);
  const int64_t d_stride = c.n + c.d_pad;
  const auto tol = kiln::testing::ToleranceFor(c.out);
  int64_t bad = 0;
  std::string first_bad;
  for (size_t i = 0; i < e.rows.size(); ++i) {
    const int64_t r = e.rows[i];
    for (int64_t j = 0; j < c.n; ++j) {
      const size_t at = i * static_cast<size_t>(c.n) + static_cast<size_t>(j);
      const double got = d.Get(static_cast<size_t>(r * d_stride + j));
      const kiln::testing::Tolerance t{tol.abs + std::ldexp(e.magnitude[at], -12), tol.rel};
      if (!kiln::testing::Close(got, e.value[at], t) && bad++ == 0)
        first_bad = "row " + std::to_string(r) + " col " + std::to_string(j) + ": got " + std::to_string(got) +
                    ", want " + std::to_string(e.value[at]);
    }
  }
  INFO("first mismatch: " << first_bad << " (" << bad << " in all)");
  CHECK(bad == 0);
  if (c.d_pad > 0) {
    const size_t es = kiln::DTypeSize(c.out);
    int64_t touched = 0;
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t j = c.n; j < d_stride; ++j)
        for (size_t byte = 0; byte < es; ++byte)
          touched += d.bytes[static_cast<size_t>(r * d_stride + j) * es + byte] != 0xFF;
    INFO("bytes of d's row padding written");
    CHECK(touched == 0);
  }
}

TEST_CASE("fp8_gemm matches the dequantized float64 product over M, N and K", "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(20261204);
  for (int64_t m : {1, 7, 64, 127, 1000, 4097}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{64, 128}, {264, 144}, {136, 528}, {4096, 4096}}) {
      Case c;
      c.m = m;
      c.n = n;
      c.k = k;
      Run(c, rng);
    }
  }
  // The smallest N and K.
  Case tiny;
  tiny.m = 3;
  tiny.n = 8;
  tiny.k = 16;
  Run(tiny, rng);
}

TEST_CASE("fp8_gemm writes fp32 and bf16, takes padded rows and scales, a 3-D a, and the C ABI", "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(11);
  for (DType out : {DType::kBFloat16, DType::kFloat32}) {
    Case c;
    c.out = out;
    c.m = 200;
    c.n = 392;
    c.k = 400;
    c.a_pad = 16;
    c.d_pad = 8;
    c.scale_pad = 3;
    Run(c, rng);
    c.three_d = true;
    Run(c, rng);
    c.three_d = false;
    c.c_api = true;
    Run(c, rng);
  }
}

TEST_CASE("every tactic of the fp8_gemm space is correct at a small shape", "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(13);
  int tactics = 0;
  for (int tile_m : kiln::gemm::kTileMChoices) {
    for (int tile_n : kiln::gemm::kTileNChoices) {
      // The fewest and the most stages (each its own cubin: every stage count compiles the same
      // code, the pipeline's depth a constant), two raster groups.
      for (int stages : {kiln::gemm::kMinStages, kiln::gemm::GemmMaxStages(tile_m, tile_n)}) {
        const kiln::gemm::GemmTactic tactic{tile_m, tile_n, stages, stages == kiln::gemm::kMinStages ? 1 : 3, 1};
        REQUIRE(kiln::gemm::Fp8GemmTacticFits(tactic));
        Case c;
        c.m = 300;
        c.n = 392;
        c.k = 1040;  // 9 K blocks, the last partial: more blocks than stages
        c.tactic = &tactic;
        Run(c, rng);
        ++tactics;
      }
    }
  }
  CHECK(tactics == 16);
  // The 128-row tiles as multicast pairs (clusters of two blocks sharing B's tile): an odd count
  // of tile rows (300 rows: the pair's second tile of the last row past M), N not a multiple.
  for (int tile_n : kiln::gemm::kTileNChoices) {
    const kiln::gemm::GemmTactic tactic{128, tile_n, kiln::gemm::GemmMaxStages(128, tile_n, 1, false, 2), 8, 1, 2};
    REQUIRE(kiln::gemm::Fp8GemmTacticFits(tactic));
    Case c;
    c.m = 300;
    c.n = 392;
    c.k = 1040;
    c.tactic = &tactic;
    Run(c, rng);
  }
}

// fp8_gemm stores D through the TMA-store epilogue where the tactic has the staging and D's rows
// are 16-byte multiples apart, else the consumers store it: both ways the same values, bit for
// bit (bf16 and fp32 out), each against the reference, columns past N and rows past M clipped.
TEST_CASE("fp8_gemm's TMA-store epilogue and the consumers' own stores give the same bits", "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(37);
  using kiln::gemm::GemmTactic;
  const GemmTactic tactics[] = {{128, 256, kiln::gemm::GemmMaxStages(128, 256), 8},
                                {64, 128, kiln::gemm::GemmMaxStages(64, 128), 8}};
  for (const GemmTactic& tactic : tactics) {
    REQUIRE(kiln::gemm::GemmHasStoreStaging(tactic.tile_m, tactic.tile_n, tactic.stages, 1, false, 1));
    for (DType out : {DType::kBFloat16, DType::kFloat32}) {
      Case c;
      c.out = out;
      c.m = 333;
      c.n = 520;  // 520 columns: the last tile of 256 (and of 128) partly past N
      c.k = 1040;
      c.tactic = &tactic;
      const Inputs in = Draw(c, rng);
      const Expected want = Reference(c, in);
      std::vector<std::vector<uint8_t>> dense_of;
      // d_pad 8: rows 16-byte multiples apart (the TMA path); d_pad 2 (4 or 8 bytes; row strides
      // are even, the contract's pairs): not.
      for (int64_t d_pad : {int64_t{8}, int64_t{2}}) {
        c.d_pad = d_pad;
        INFO(c.Describe());
        const HostTensor d = Launch(c, in);
        const size_t es = kiln::DTypeSize(out);
        std::vector<uint8_t> dense;
        for (int64_t r = 0; r < c.m; ++r) {
          const auto row = d.bytes.begin() + static_cast<std::ptrdiff_t>(r * (c.n + d_pad) * static_cast<int64_t>(es));
          dense.insert(dense.end(), row, row + static_cast<std::ptrdiff_t>(c.n * static_cast<int64_t>(es)));
          for (int64_t j = c.n; j < c.n + d_pad; ++j)  // the padding: still poison
            for (size_t byte = 0; byte < es; ++byte)
              CHECK(d.bytes[static_cast<size_t>((r * (c.n + d_pad) + j)) * es + byte] == 0xFF);
        }
        // Spot-check the values against the reference (the full check is Run's, elsewhere).
        int64_t bad = 0;
        for (size_t i = 0; i < want.rows.size(); i += 37) {
          const int64_t r = want.rows[i];
          for (int64_t j = 0; j < c.n; j += 13) {
            const double got = d.Get(static_cast<size_t>(r * (c.n + d_pad) + j));
            const double v = want.value[i * static_cast<size_t>(c.n) + static_cast<size_t>(j)];
            const double mag = want.magnitude[i * static_cast<size_t>(c.n) + static_cast<size_t>(j)];
            const auto tol = kiln::testing::ToleranceFor(out);
            if (!kiln::testing::Close(got, v, {tol.abs + std::ldexp(mag, -12), tol.rel})) ++bad;
          }
        }
        CHECK(bad == 0);
        dense_of.push_back(std::move(dense));
      }
      CHECK(dense_of[0] == dense_of[1]);
    }
  }
}

TEST_CASE("split-K fp8_gemm: every split of the decode tiles, blocks without K steps, the heuristic's splits",
          "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(19);
  int runs = 0;
  for (int tile_n : kiln::gemm::kTileNChoices) {
    for (int split : {2, 4, 8}) {
      const kiln::gemm::GemmTactic tactic{64, tile_n, kiln::gemm::GemmMaxStages(64, tile_n, split), 8, split};
      REQUIRE(kiln::gemm::Fp8GemmTacticFits(tactic));
      // K of 9 blocks (the last partial) over the cluster, and K of one block: most blocks of the
      // cluster have no K step and add zeros; M past one tile row, N not a tile multiple.
      for (int64_t k : {1040, 112}) {
        Case c;
        c.m = k == 112 ? 70 : 5;
        c.n = 392;
        c.k = k;
        c.tactic = &tactic;
        Run(c, rng);
        ++runs;
      }
    }
  }
  CHECK(runs == 2 * 3 * static_cast<int>(std::size(kiln::gemm::kTileNChoices)));  // every tile_n, split, K
  // The heuristic splits a decode row of the Llama-3.1-8B shapes (4 ways at N 6144, K 4096) and
  // the result holds, fp32 out too: with the GEMV path off, which takes such rows by default.
  const Fp8GemvOff tile_kernel_only;
  const int sms = kiln::testing::RequireGpu().multiprocessors;
  for (auto [n, k] : {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 14336}}) {
    for (DType out : {DType::kBFloat16, DType::kFloat32}) {
      Case c;
      c.out = out;
      c.m = 3;
      c.n = n;
      c.k = k;
      INFO(c.Describe() << ": heuristic "
                        << kiln::client::GemmTacticText(kiln::client::ChooseFp8GemmTactic(c.m, n, k, sms)));
      CHECK(kiln::client::ChooseFp8GemmTactic(c.m, n, k, sms).split_k > 1);
      Run(c, rng);
    }
  }
}

// The small-M GEMV kernel through Fp8GemmGemv (the kernel whatever the rule says) and through
// kiln::ops::fp8_gemm where the rule takes it (M 1-8): every M to 16 (one pass of 8 rows of a, or
// two), N from one warp's 16
// rows to many blocks, so each k-part count runs (8 at N 16; 4 and 2 at N of 32 and 64 rows an
// SM), K not a multiple of 128 (a partial last scale block) and of one block; fp32 out,
// padded rows and scales, a 3-D a.
TEST_CASE("fp8_gemm's GEMV kernel for M <= 16 matches the dequantized float64 product", "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(20261206);
  const int sms = kiln::testing::RequireGpu().multiprocessors;
  for (int64_t m = 1; m <= kiln::gemm::kFp8GemvMaxRows; ++m) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{16, 16}, {48, 144}, {4096, 1040}}) {
      Case c;
      c.m = m;
      c.n = n;
      c.k = k;
      c.gemv = true;
      REQUIRE(kiln::client::Fp8GemmGemvSuits(m, n));
      Run(c, rng);
    }
  }
  // N of 32 and 64 rows a multiprocessor: 4 and 2 k parts (the fewest whose blocks cover the SMs).
  const int64_t n_four = 32 * int64_t{sms}, n_two = 64 * int64_t{sms};
  CHECK(kiln::gemm::Fp8GemvKParts(n_four, sms) == 4);
  CHECK(kiln::gemm::Fp8GemvKParts(n_two, sms) == 2);
  CHECK(kiln::gemm::Fp8GemvKParts(4096, sms) == (4096 / 32 >= sms ? 4 : 8));
  for (auto [n, k] : {std::pair<int64_t, int64_t>{n_four, 4096}, {n_two, 528}}) {
    for (int64_t m : {1, 8, 9, 16}) {
      Case c;
      c.m = m;
      c.n = n;
      c.k = k;
      c.gemv = true;
      Run(c, rng);
    }
  }
  // Each k-part count forced at one shape (KILN_FP8_GEMM_GEMV_K_PARTS's effect): 64, 32 and 16
  // rows a block, K over 2, 4 and 8 warps, the last part shorter.
  for (int parts : {2, 4, 8}) {
    kiln::client::SetFp8GemmGemvKPartsForTesting(parts);
    INFO("k parts " << parts);
    Case c;
    c.m = 3;
    c.n = 4096 + 48;
    c.k = 1040;
    c.gemv = true;
    Run(c, rng);
  }
  kiln::client::SetFp8GemmGemvKPartsForTesting(0);  // the environment's (auto) again
  for (DType out : {DType::kBFloat16, DType::kFloat32}) {
    Case c;
    c.out = out;
    c.m = 10;
    c.n = 400;
    c.k = 400;
    c.a_pad = 16;
    c.d_pad = 8;
    c.scale_pad = 3;
    c.gemv = true;
    Run(c, rng);
    c.three_d = true;
    Run(c, rng);
    // Through kiln::ops::fp8_gemm and kiln_fp8_gemm, whose rule takes M 8 at N 400.
    c.three_d = false;
    c.gemv = false;
    c.m = 8;
    REQUIRE(kiln::client::Fp8GemmGemvWins(c.m, c.n, sms));
    Run(c, rng);
    c.three_d = true;
    Run(c, rng);
    c.three_d = false;
    c.c_api = true;
    Run(c, rng);
  }
  // The Llama-3.1-8B decode shapes the rule takes, through the op (qkv, o, down at M 1-16: the
  // wide entry from M 9).
  for (auto [n, k] : {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 14336}}) {
    for (int64_t m : {1, 5, 8, 9, 12, 16}) {
      Case c;
      c.m = m;
      c.n = n;
      c.k = k;
      INFO("the rule takes it on " << sms << " SMs: " << kiln::client::Fp8GemmGemvWins(m, n, sms));
      Run(c, rng);
    }
  }
}

TEST_CASE("fp8_gemm's GEMV kernel gives the same bits every call and refuses shapes it does not take",
          "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(23);
  Case c;
  c.m = 13;
  c.n = 6144;
  c.k = 4096;
  c.gemv = true;
  const Inputs in = Draw(c, rng);
  const HostTensor first = Launch(c, in), second = Launch(c, in);
  CHECK(first.bytes == second.bytes);
  // The switch off: the tile kernel, within the same tolerance of the same reference (Run).
  {
    const Fp8GemvOff tile_kernel_only;
    c.gemv = false;
    c.m = 4;
    Run(c, rng);
  }
  // More rows than the kernel takes, and N not a multiple of 16: refused before any launch.
  for (auto [m, n] : {std::pair<int64_t, int64_t>{17, 64}, {4, 24}}) {
    DeviceBuffer da(static_cast<size_t>(m * 128)), db(static_cast<size_t>(n * 128)), dsa(static_cast<size_t>(m) * 4),
        dsb(4), dd(static_cast<size_t>(m * n) * 2);
    const auto status = kiln::client::Fp8GemmGemv(TensorView::Contiguous(dd.data(), DType::kBFloat16, {m, n}),
                                                  TensorView::Contiguous(da.data(), kFp8, {m, 128}),
                                                  TensorView::Contiguous(db.data(), kFp8, {n, 128}),
                                                  TensorView::Contiguous(dsa.data(), DType::kFloat32, {m, 1}),
                                                  TensorView::Contiguous(dsb.data(), DType::kFloat32, {1, 1}), nullptr);
    INFO(status.ToString());
    CHECK(status.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(status.message().find("the fp8 GEMV kernel takes 1 to 16 rows") != std::string::npos);
  }
}

// The error of the block-scaled product against a bf16 GEMM's on the same data: with power-of-two
// scales every dequantized value is exact in bf16, so kiln::ops::gemm multiplies the very same
// matrices. fp8_gemm's error (fp32 out: only the tensor cores' in-block sums and the promotion)
// must stay below what a bf16 GEMM with a bf16 output makes (its rounding of d), the bar the
// issue sets; both figures are printed for docs/kernels-gemm.md.
TEST_CASE("fp8_gemm's error stays within a bf16 GEMM's on the same data", "[gpu][gemm][fp8]") {
  GpuSession session = HopperSession();
  std::mt19937 rng(17);
  for (int64_t k : {1024, 7168}) {
    Case c;
    c.out = DType::kFloat32;
    c.m = 256;
    c.n = 256;
    c.k = k;
    c.power_of_two_scales = true;
    const Inputs in = Draw(c, rng);
    const HostTensor fp8 = Launch(c, in);
    const Expected e = Reference(c, in);

    // The same matrices in bf16, multiplied by kiln::ops::gemm into bf16.
    HostTensor a16 = kiln::testing::MakeHostTensor(DType::kBFloat16, static_cast<size_t>(c.m * c.k));
    HostTensor b16 = kiln::testing::MakeHostTensor(DType::kBFloat16, static_cast<size_t>(c.n * c.k));
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t l = 0; l < c.k; ++l)
        a16.Set(static_cast<size_t>(r * c.k + l), in.a.Get(static_cast<size_t>(r * in.a_stride + l)) *
                                                      in.sa.Get(static_cast<size_t>(r * in.s_stride + l / 128)));
    for (int64_t j = 0; j < c.n; ++j)
      for (int64_t l = 0; l < c.k; ++l)
        b16.Set(static_cast<size_t>(j * c.k + l),
                in.b.Get(static_cast<size_t>(j * c.k + l)) *
                    in.sb.Get(static_cast<size_t>((j / 128) * in.s_stride + l / 128)));
    DeviceBuffer da(a16.bytes.size()), db(b16.bytes.size()), dd(static_cast<size_t>(c.m * c.n) * 2);
    da.Upload(a16.bytes);
    db.Upload(b16.bytes);
    dd.Poison();
    const auto td = TensorView::Contiguous(dd.data(), DType::kBFloat16, {c.m, c.n});
    REQUIRE(kiln::ops::gemm(td, TensorView::Contiguous(da.data(), DType::kBFloat16, {c.m, c.k}),
                            TensorView::Contiguous(db.data(), DType::kBFloat16, {c.n, c.k}))
                .ok());
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    const HostTensor bf16{DType::kBFloat16, dd.Download()};

    // Errors relative to the RMS of d (a relative error per element is meaningless near zero).
    double rms = 0;
    for (double v : e.value) rms += v * v;
    rms = std::sqrt(rms / static_cast<double>(e.value.size()));
    double fp8_max = 0, bf16_max = 0, fp8_sq = 0, bf16_sq = 0;
    REQUIRE(e.value.size() == e.rows.size() * static_cast<size_t>(c.n));
    for (size_t i = 0; i < e.value.size(); ++i) {
      // Reference() may check a sample of rows: element i is row e.rows[i / n], column i % n.
      const size_t at = static_cast<size_t>(e.rows[i / static_cast<size_t>(c.n)] * c.n) + i % static_cast<size_t>(c.n);
      const double ef = std::fabs(fp8.Get(at) - e.value[i]) / rms, eb = std::fabs(bf16.Get(at) - e.value[i]) / rms;
      fp8_max = std::max(fp8_max, ef);
      bf16_max = std::max(bf16_max, eb);
      fp8_sq += ef * ef;
      bf16_sq += eb * eb;
    }
    const double count = static_cast<double>(e.value.size());
    std::printf("fp8_gemm error, M 256 N 256 K %lld, relative to RMS(d): fp8 (fp32 out) max %.3g rms %.3g; bf16 gemm "
                "(bf16 out) max %.3g rms %.3g\n",
                static_cast<long long>(k), fp8_max, std::sqrt(fp8_sq / count), bf16_max, std::sqrt(bf16_sq / count));
    INFO("k " << k << ": fp8 max " << fp8_max << ", bf16 max " << bf16_max);
    CHECK(fp8_max <= bf16_max);
    CHECK(std::sqrt(fp8_sq / count) <= std::sqrt(bf16_sq / count));
  }
}

}  // namespace
