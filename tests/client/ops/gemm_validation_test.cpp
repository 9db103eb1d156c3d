// kiln::ops::gemm refuses every bad argument before touching the driver, with a message naming
// the argument, what was expected and what was found; and the default tactic of a shape
// (ChooseGemmTactic) is what docs/kernels-gemm.md says. These run without a GPU: the pointers
// are never dereferenced.
#include <catch2/catch.hpp>

#include <limits>
#include <string>

#include "client/ops/gemm/gemm_gemv.h"
#include "client/ops/gemm/gemm_ops.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
#include "kiln/ops/gemm.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;

constexpr uintptr_t kA = 0x7f0000000000;  // fake device addresses, far apart
constexpr uintptr_t kB = kA + (uintptr_t{1} << 32);
constexpr uintptr_t kD = kA + (uintptr_t{2} << 32);
constexpr uintptr_t kC = kA + (uintptr_t{3} << 32);
constexpr uintptr_t kBias = kA + (uintptr_t{4} << 32);

void* At(uintptr_t address) { return reinterpret_cast<void*>(address); }
TensorView Matrix(uintptr_t address, DType dtype, int64_t rows, int64_t cols) {
  return TensorView::Contiguous(At(address), dtype, {rows, cols});
}

using kiln::testing::RequireInvalid;

kiln::Status Gemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView* bias = nullptr,
                  const TensorView* c = nullptr, double beta = 1.0) {
  return kiln::ops::gemm(d, a, b, bias, c, beta, nullptr);
}

const DType kBf16 = DType::kBFloat16;

TEST_CASE("gemm refuses unsupported and mismatched dtypes", "[client][ops][validation][gemm]") {
  RequireInvalid(Gemm(Matrix(kD, DType::kFloat32, 4, 64), Matrix(kA, DType::kFloat32, 4, 64),
                      Matrix(kB, DType::kFloat32, 64, 64)),
                 "kiln::ops::gemm: a: dtype fp32 is not supported; expected bf16 or fp16");
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, DType::kFloat16, 64, 64)),
                 "kiln::ops::gemm: b: expected dtype bf16 (a's), found fp16");
  RequireInvalid(Gemm(Matrix(kD, DType::kInt32, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64)),
                 "kiln::ops::gemm: d: dtype int32 is not supported; expected bf16, fp16 or fp32");
  const TensorView bias = TensorView::Contiguous(At(kBias), DType::kFloat32, {64});
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64), &bias),
                 "kiln::ops::gemm: bias: expected dtype bf16 (a's), found fp32");
  const TensorView c = Matrix(kC, DType::kFloat32, 4, 64);
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64), nullptr, &c),
                 "kiln::ops::gemm: c: expected dtype bf16 (d's), found fp32");
}

TEST_CASE("gemm refuses mismatched shapes and N or K that TMA cannot read", "[client][ops][validation][gemm]") {
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 72)),
                 "kiln::ops::gemm: b: expected shape [N, 64] (K = a's last dim), found [64, 72]");
  RequireInvalid(
      Gemm(Matrix(kD, kBf16, 4, 56), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64)),
      "kiln::ops::gemm: d: expected a's leading dims and N = 64 (b's rows) last, found [4, 56] for a [4, 64]");
  RequireInvalid(Gemm(Matrix(kD, kBf16, 5, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64)),
                 "d: expected a's leading dims and N = 64 (b's rows) last, found [5, 64] for a [4, 64]");
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 60), Matrix(kB, kBf16, 64, 60)),
                 "kiln::ops::gemm: a: K (the last dim) must be a positive multiple of 8 (16-byte rows for TMA), found "
                 "60 in shape [4, 60]");
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 60), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 60, 64)),
                 "kiln::ops::gemm: b: N (the rows) must be a positive multiple of 8, found 60 in shape [60, 64]");
  const TensorView b3 = TensorView::Contiguous(At(kB), kBf16, {2, 32, 64});
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), b3),
                 "kiln::ops::gemm: b: expected a 2-D tensor [N, K], found rank 3 [2, 32, 64]");
  const TensorView bias = TensorView::Contiguous(At(kBias), kBf16, {56});
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64), &bias),
                 "kiln::ops::gemm: bias: expected shape [64] (N), found [56]");
  const TensorView c = Matrix(kC, kBf16, 4, 72);
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64), nullptr, &c),
                 "kiln::ops::gemm: c: expected shape [4, 64] (d's), found [4, 72]");
}

TEST_CASE("gemm refuses operands TMA cannot read and outputs it cannot write", "[client][ops][validation][gemm]") {
  // a 8-byte aligned only; b with a row stride of 68 elements (not whole 16 bytes).
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA + 8, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64)),
                 "kiln::ops::gemm: a: data pointer 0x7f0000000008 is not 16-byte aligned (TMA reads it)");
  const TensorView b_padded = TensorView::Strided(At(kB), kBf16, {64, 64}, {68, 1});
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), b_padded),
                 "kiln::ops::gemm: b: row stride 68 is not a multiple of 8 elements (16 bytes, for TMA)");
  const TensorView d_odd = TensorView::Strided(At(kD), kBf16, {4, 64}, {65, 1});
  RequireInvalid(Gemm(d_odd, Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64)),
                 "kiln::ops::gemm: d: row stride 65 is odd; it must be even");
  RequireInvalid(Gemm(Matrix(kD + 2, DType::kFloat32, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64)),
                 "d: data pointer");
  RequireInvalid(Gemm(Matrix(kA, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64)), "overlap");
  const TensorView on_other = TensorView::Contiguous(At(kB), kBf16, {64, 64}, Device::CUDA(1));
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), on_other),
                 "kiln::ops::gemm: b: on cuda:1, but a is on cuda:0; all tensors must be on one device");
  const TensorView c = Matrix(kC, kBf16, 4, 64);
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64), nullptr, &c,
                      std::numeric_limits<double>::infinity()),
                 "kiln::ops::gemm: beta: expected a finite float, found inf");
  RequireInvalid(Gemm(Matrix(kD, kBf16, 4, 64), Matrix(kA, kBf16, 4, 64), Matrix(kB, kBf16, 64, 64), nullptr, &c, 1e39),
                 "beta: expected a finite float");
}

TEST_CASE("gemm plans what the kernel takes, and accepts c = d and beta 0", "[client][ops][gemm]") {
  const TensorView a = TensorView::Contiguous(At(kA), kBf16, {2, 3, 64});  // 6 rows
  const TensorView b = Matrix(kB, kBf16, 128, 64);
  const TensorView d = TensorView::Strided(At(kD), DType::kFloat32, {2, 3, 128}, {3 * 136, 136, 1});
  auto plan = kiln::client::PlanGemm(d, a, b, nullptr, &d, 0.5, "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(plan->m == 6);
  CHECK(plan->n == 128);
  CHECK(plan->k == 64);
  CHECK(plan->d_row_stride == 136);
  CHECK(plan->c == plan->d);  // accumulate in place
  CHECK(plan->beta == 0.5f);
  CHECK(plan->out_dtype == DType::kFloat32);
  auto no_c = kiln::client::PlanGemm(d, a, b, nullptr, &d, 0.0, "test");
  REQUIRE(no_c.ok());
  CHECK(no_c->c == nullptr);  // beta 0: c is not read
  // M = 0 plans (and launches nothing).
  auto empty = kiln::client::PlanGemm(Matrix(kD, kBf16, 0, 128), Matrix(kA, kBf16, 0, 64), b, nullptr, nullptr, 1.0,
                                      "test");
  REQUIRE(empty.ok());
  CHECK(empty->m == 0);
  // A tactic outside the space is refused before anything runs.
  const kiln::Status s = kiln::client::LaunchGemmPlan(*plan, {128, 256, 5, 8}, nullptr);
  RequireInvalid(s, "test: tactic t128x256x64s5g8 is not in the gemm tactic space");
}

TEST_CASE("gemm takes a GEMV kernel where it won on the H200, unless KILN_GEMM_GEMV says 0", "[client][ops][gemm]") {
  using kiln::client::GemmGemvSuits;
  constexpr int kSms = 132;  // an H200's
  // M 1: always (the fp32 kernel), whatever N; Llama-3.1-8B's gate-up too.
  CHECK(GemmGemvSuits(1, 8, kSms));
  CHECK(GemmGemvSuits(1, 28672, kSms));
  // M 2..16: while N's blocks of 16 rows fit on the SMs at once (3 an SM: N <= 6336 here).
  for (int64_t m = 2; m <= 16; ++m) {
    CHECK(GemmGemvSuits(m, 6144, kSms));  // qkv
    CHECK(GemmGemvSuits(m, 4096, kSms));  // o, down
    CHECK(GemmGemvSuits(m, 6336, kSms));  // 396 blocks: one wave
    CHECK_FALSE(GemmGemvSuits(m, 6344, kSms));
    CHECK_FALSE(GemmGemvSuits(m, 28672, kSms));  // gate-up: the tile kernel
  }
  CHECK(GemmGemvSuits(8, 28672, 600));  // a device with more SMs holds it
  CHECK_FALSE(GemmGemvSuits(0, 4096, kSms));
  CHECK_FALSE(GemmGemvSuits(17, 4096, kSms));
  CHECK_FALSE(GemmGemvSuits(64, 4096, kSms));
  // M 17..32 with the wide kernel allowed: the same fit rule; never past 32.
  for (int64_t m = 17; m <= 32; ++m) {
    CHECK(GemmGemvSuits(m, 6144, kSms, kiln::gemm::kGemvWideMaxRows));
    CHECK_FALSE(GemmGemvSuits(m, 6344, kSms, kiln::gemm::kGemvWideMaxRows));
  }
  CHECK_FALSE(GemmGemvSuits(33, 4096, kSms, kiln::gemm::kGemvWideMaxRows));
  CHECK_FALSE(GemmGemvSuits(33, 4096, kSms, 64));  // the kernels' own limit

  const TensorView b = Matrix(kB, kBf16, 128, 64);
  auto plan_of = [&](int64_t m) {
    auto plan = kiln::client::PlanGemm(Matrix(kD, kBf16, m, 128), Matrix(kA, kBf16, m, 64), b, nullptr, nullptr, 1.0,
                                       "test");
    REQUIRE(plan.ok());
    return *plan;
  };
  kiln::client::SetGemmGemvForTesting(1);
  CHECK_FALSE(kiln::client::GemmTakesGemv(plan_of(0), kSms));  // nothing to launch either way
  for (int64_t m = 1; m <= 16; ++m) CHECK(kiln::client::GemmTakesGemv(plan_of(m), kSms));
  CHECK_FALSE(kiln::client::GemmTakesGemv(plan_of(17), kSms));  // the wide kernel is off by default
  kiln::client::SetGemmGemvWideForTesting(1);
  for (int64_t m = 17; m <= 32; ++m) CHECK(kiln::client::GemmTakesGemv(plan_of(m), kSms));
  CHECK_FALSE(kiln::client::GemmTakesGemv(plan_of(33), kSms));
  kiln::client::SetGemmGemvWideForTesting(-1);
  CHECK_FALSE(kiln::client::GemmTakesGemv(plan_of(17), kSms));
  kiln::client::SetGemmGemvForTesting(0);
  CHECK_FALSE(kiln::client::GemmTakesGemv(plan_of(1), kSms));
  kiln::client::SetGemmGemvWideForTesting(1);
  CHECK_FALSE(kiln::client::GemmTakesGemv(plan_of(20), kSms));  // KILN_GEMM_GEMV=0 wins
  kiln::client::SetGemmGemvWideForTesting(-1);
  kiln::client::SetGemmGemvForTesting(-1);
  // The internal op refuses more rows than the kernel takes, after gemm's own checks and before
  // any driver call; M = 0 is OK and launches nothing.
  const kiln::Status many = kiln::client::GemmGemv(Matrix(kD, kBf16, 33, 128), Matrix(kA, kBf16, 33, 64), b, nullptr,
                                                   nullptr, 1.0, nullptr);
  RequireInvalid(many, "kiln::client::GemmGemv: a: the GEMV kernels take at most 32 rows, found 33");
  const kiln::Status odd_n = kiln::client::GemmGemv(Matrix(kD, kBf16, 1, 12), Matrix(kA, kBf16, 1, 64),
                                                    Matrix(kB, kBf16, 12, 64), nullptr, nullptr, 1.0, nullptr);
  CHECK(odd_n.code() == StatusCode::kInvalidArgument);  // gemm's check: N a multiple of 8
  CHECK(kiln::client::GemmGemv(Matrix(kD, kBf16, 0, 128), Matrix(kA, kBf16, 0, 64), b, nullptr, nullptr, 1.0, nullptr)
            .ok());
}

TEST_CASE("the default gemm tactic follows the shape and the SM count", "[client][ops][gemm]") {
  using kiln::client::ChooseGemmTactic;
  // Decode: one consumer and the wide tile, K split over clusters of 4 so that 64 blocks stream
  // the weight (16 tiles; clusters of 8 would not all run at once: 15 fit).
  auto decode = ChooseGemmTactic(1, 4096, 4096, 132);
  CHECK(decode.tile_m == 64);
  CHECK(decode.tile_n == 256);
  CHECK(decode.split_k == 4);
  CHECK(decode.stages == kiln::gemm::GemmMaxStages(64, 256, 4));
  // M 64: the narrow tile; 64 tiles split twice, 96 not split (192 blocks would not fit).
  CHECK(kiln::client::GemmTacticText(ChooseGemmTactic(64, 4096, 4096, 132)) == "t64x64x64s8g8k2");
  CHECK(kiln::client::GemmTacticText(ChooseGemmTactic(64, 6144, 4096, 132)) == "t64x64x64s8g8");
  // More tiles than SMs: no split, the width that fills the waves (112 tiles of 64 x 256).
  CHECK(kiln::client::GemmTacticText(ChooseGemmTactic(16, 28672, 4096, 132)) == "t64x256x64s5g8");
  // A short K is not split below 4 K steps a block.
  CHECK(ChooseGemmTactic(1, 4096, 256, 132).split_k == 1);
  CHECK(ChooseGemmTactic(1, 4096, 512, 132).split_k == 2);
  // The clusters that run at once, as the H200's occupancy calculator counts them.
  CHECK(kiln::client::GemmClusterSlots(132, 1) == 132);
  CHECK(kiln::client::GemmClusterSlots(132, 2) == 66);
  CHECK(kiln::client::GemmClusterSlots(132, 4) == 30);
  CHECK(kiln::client::GemmClusterSlots(132, 8) == 15);
  // M 256 x N 4096: 64 tiles of 128 x 128 split twice fill 128 SMs (32 of 128 x 256 would not).
  auto mid = ChooseGemmTactic(256, 4096, 4096, 132);
  CHECK(mid.tile_m == 128);
  CHECK(mid.split_k == 2);
  // Large M never splits: the tiles fill the waves and a split only adds the reduction.
  for (int64_t m : {1024, 4096, 16384}) CHECK(ChooseGemmTactic(m, 4096, 4096, 132).split_k == 1);
  // Prefill 4096 x 6144: 768 tiles of 128x256 in 6 waves beat 1536 of 128x128 in 12.
  auto prefill = ChooseGemmTactic(4096, 6144, 4096, 132);
  CHECK(prefill.tile_m == 128);
  CHECK(prefill.tile_n == 256);
  CHECK(prefill.stages == 4);
  CHECK(prefill.group_m == 8);
  // From M 4096 on, that tile in multicast pairs (measured 1-2.5 % faster there); below, alone.
  CHECK(prefill.multicast == 2);
  CHECK(ChooseGemmTactic(16384, 4096, 14336, 132).multicast == 2);
  CHECK(ChooseGemmTactic(2048, 6144, 4096, 132).multicast == 1);
  CHECK(ChooseGemmTactic(1024, 4096, 4096, 132).multicast == 1);
  // Many waves: the biggest tile, even where a smaller one fills the last wave better
  // (4096 x 28672: 128x64 would fill 0.996 of its 109 waves, 128x256 0.970 of 28).
  CHECK(ChooseGemmTactic(4096, 28672, 4096, 132).tile_n == 256);
  CHECK(ChooseGemmTactic(16384, 6144, 4096, 132).tile_n == 256);
  // One wave either way: 128 tiles of 128x256 (1024 x 4096).
  CHECK(ChooseGemmTactic(1024, 4096, 4096, 132).tile_n == 256);
  // 1024 x 6144: 192 tiles of 128x256 take 2 waves; 384 of 64x256 take 3 at 0.89 the rate, and
  // 128x128 (0.75 from M 1024 on) no longer wins (measured: 75.5 against 79.4 us, H100).
  CHECK(kiln::client::GemmTacticText(ChooseGemmTactic(1024, 6144, 4096, 132)) == "t64x256x64s5g8");
  // The 192-wide tiles are ranked from M 1024 on where K hides their register stores:
  // 1536 x 6144 x 4096 takes 384 tiles of 128x192 in 3 waves (110.4 against 129.8 us with
  // 128x128); at K 768 the same shape class keeps 128x256 (128x192 was 1.19x slower).
  CHECK(kiln::client::GemmTacticText(ChooseGemmTactic(1536, 6144, 4096, 132)) == "t128x192x64s5g8");
  CHECK(ChooseGemmTactic(1536, 2048, 768, 132).tile_n == 256);
  // Below M 1024 the first table stays (its 128x128 split measured best at M 65-512).
  CHECK(kiln::client::GemmTacticText(ChooseGemmTactic(512, 1536, 2048, 132)) == "t128x128x64s5g8k2");
  // Every choice is in the space.
  for (int64_t m : {1, 16, 64, 65, 256, 1024, 4096, 16384})
    for (int64_t n : {8, 1536, 4096, 6144, 28672}) {
      INFO(m << " x " << n);
      CHECK(kiln::gemm::GemmTacticFits(ChooseGemmTactic(m, n, 4096, 132)));
      CHECK(kiln::gemm::GemmTacticFits(ChooseGemmTactic(m, n, 4096, 0)));
    }
}

}  // namespace
