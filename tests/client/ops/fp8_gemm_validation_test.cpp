// kiln::ops::fp8_gemm refuses every bad argument before touching the driver, naming the
// argument, what was expected and what was found; the plan carries what the kernel takes; the
// fp8 heuristic (ChooseFp8GemmTactic) stays inside fp8_gemm's tactic space and picks what
// docs/kernels-gemm.md says; a forced tactic outside the space is refused; the small-M GEMV
// kernel takes the shapes its rule names, and its own entry refuses the others. Without a GPU: the
// pointers are never dereferenced.
#include <catch2/catch.hpp>

#include <string>

#include "client/ops/gemm/fp8_gemm_gemv.h"
#include "client/ops/gemm/fp8_gemm_ops.h"
#include "client/ops/gemm/fp8_gemm_plan.h"
#include "kiln/ops/gemm.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;

constexpr uintptr_t kA = 0x7f0000000000;  // fake device addresses, far apart
constexpr uintptr_t kB = kA + (uintptr_t{1} << 34);
constexpr uintptr_t kD = kA + (uintptr_t{2} << 34);
constexpr uintptr_t kSa = kA + (uintptr_t{3} << 34);
constexpr uintptr_t kSb = kA + (uintptr_t{4} << 34);
const DType kFp8 = DType::kFloat8E4M3;
const DType kF32 = DType::kFloat32;

void* At(uintptr_t address) { return reinterpret_cast<void*>(address); }
TensorView T(uintptr_t address, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::Contiguous(At(address), dtype, shape);
}

using kiln::testing::RequireInvalid;

// M 100, N 264, K 400: kb 4, nb 3.
struct Args {
  TensorView d = T(kD, DType::kBFloat16, {100, 264});
  TensorView a = T(kA, kFp8, {100, 400});
  TensorView b = T(kB, kFp8, {264, 400});
  TensorView sa = T(kSa, kF32, {100, 4});
  TensorView sb = T(kSb, kF32, {3, 4});
  kiln::Status Call() const { return kiln::ops::fp8_gemm(d, a, b, sa, sb); }
};

TEST_CASE("fp8_gemm plans a valid call with its scales' strides", "[client][ops][validation][gemm]") {
  Args x;
  x.a = T(kA, kFp8, {4, 25, 400});  // leading dims flattened into M 100
  x.d = T(kD, DType::kFloat32, {4, 25, 264});
  x.sa = T(kSa, kF32, {4, 25, 4});
  const auto plan = kiln::client::PlanFp8Gemm(x.d, x.a, x.b, x.sa, x.sb, "test");
  REQUIRE(plan.ok());
  CHECK(plan->m == 100);
  CHECK(plan->n == 264);
  CHECK(plan->k == 400);
  CHECK(plan->out_dtype == DType::kFloat32);
  CHECK(plan->a_row_stride == 400);
  CHECK(plan->b_row_stride == 400);
  CHECK(plan->d_row_stride == 264);
  CHECK(plan->a_scale_stride == 4);
  CHECK(plan->b_scale_stride == 4);
  CHECK(plan->a_scales == At(kSa));
  CHECK(plan->b_scales == At(kSb));

  // Scales with padded rows (a quantizer's aligned buffer) are taken, their stride kept.
  Args padded;
  padded.sa = TensorView::Strided(At(kSa), kF32, {100, 4}, {8, 1});
  padded.sb = TensorView::Strided(At(kSb), kF32, {3, 4}, {16, 1});
  const auto p2 = kiln::client::PlanFp8Gemm(padded.d, padded.a, padded.b, padded.sa, padded.sb, "test");
  REQUIRE(p2.ok());
  CHECK(p2->a_scale_stride == 8);
  CHECK(p2->b_scale_stride == 16);
}

TEST_CASE("fp8_gemm refuses bad dtypes, shapes, scales and layouts", "[client][ops][validation][gemm]") {
  auto with = [](auto edit) {
    Args x;
    edit(x);
    return x.Call();
  };
  RequireInvalid(with([](Args& x) {
                   x.a = T(kA, DType::kBFloat16, {100, 400});
                 }),
                 "kiln::ops::fp8_gemm: a: dtype bf16 is not supported; expected fp8_e4m3");
  RequireInvalid(with([](Args& x) {
                   x.b = T(kB, DType::kUInt8, {264, 400});
                 }),
                 "b: expected dtype fp8_e4m3 (a's), found uint8");
  RequireInvalid(with([](Args& x) {
                   x.d = T(kD, DType::kFloat16, {100, 264});
                 }),
                 "d: dtype fp16 is not supported; expected bf16 or fp32");
  RequireInvalid(with([](Args& x) {
                   x.b = T(kB, kFp8, {2, 264, 400});
                 }),
                 "b: expected a 2-D tensor [N, K], found rank 3");
  RequireInvalid(with([](Args& x) { x.b = T(kB, kFp8, {264, 384}); }), "b: expected shape [N, 400] (K = a's last dim)");
  RequireInvalid(with([](Args& x) {
                   x.d = T(kD, DType::kBFloat16, {100, 256});
                 }),
                 "d: expected a's leading dims and N = 264");
  // K a multiple of 8 but not of 16: an fp8 row is then not whole 16 bytes.
  RequireInvalid(with([](Args& x) {
                   x.a = T(kA, kFp8, {100, 392});
                   x.b = T(kB, kFp8, {264, 392});
                 }),
                 "a: K (the last dim) must be a positive multiple of 16 (16-byte rows for TMA), found 392");
  RequireInvalid(with([](Args& x) {
                   x.b = T(kB, kFp8, {260, 400});
                   x.d = T(kD, DType::kBFloat16, {100, 260});
                 }),
                 "b: N (the rows) must be a positive multiple of 8, found 260");
  // The scales: fp8 without them is not a call; wrong counts, dtypes and ranks are named.
  RequireInvalid(with([](Args& x) { x.sa = TensorView{}; }), "a_scales");
  RequireInvalid(with([](Args& x) {
                   x.sa = T(kSa, kF32, {100, 3});
                 }),
                 "a_scales: expected a's leading dims and ceil(K / 128) = 4 last, found [100, 3]");
  RequireInvalid(with([](Args& x) { x.sa = T(kSa, kF32, {99, 4}); }), "a_scales: expected a's leading dims");
  RequireInvalid(with([](Args& x) {
                   x.sa = T(kSa, DType::kBFloat16, {100, 4});
                 }),
                 "a_scales: expected dtype fp32, found bf16");
  RequireInvalid(with([](Args& x) {
                   x.sb = T(kSb, kF32, {2, 4});
                 }),
                 "b_scales: expected shape [ceil(N / 128), ceil(K / 128)] = [3, 4], found [2, 4]");
  RequireInvalid(with([](Args& x) { x.sb = T(kSb, kF32, {12}); }),
                 "b_scales: expected a 2-D tensor [ceil(N / 128), ceil(K / 128)] = [3, 4], found rank 1");
  RequireInvalid(with([](Args& x) {
                   x.sb = T(kSb, kF32, {264, 4});
                 }),
                 "b_scales: expected shape [ceil(N / 128), ceil(K / 128)] = [3, 4], found [264, 4]");
  RequireInvalid(with([](Args& x) { x.sb = TensorView::Strided(At(kSb), kF32, {3, 4}, {4, 2}); }), "b_scales");
  // The kernel reads scales at 32-bit offsets: rows spanning 2^31 elements (a view into a far
  // larger buffer) are refused; just below is taken.
  RequireInvalid(with([](Args& x) {
                   x.sa = TensorView::Strided(At(kSa), kF32, {100, 4}, {22'000'000, 1});
                 }),
                 "a_scales: its 100 rows 22000000 elements apart span 2178000004 elements; the kernels index scales "
                 "with 32-bit offsets (below 2^31)");
  RequireInvalid(with([](Args& x) {
                   x.sb = TensorView::Strided(At(kSb), kF32, {3, 4}, {1'100'000'000, 1});
                 }),
                 "b_scales: its 3 rows 1100000000 elements apart span 2200000004 elements");
  {
    Args below;
    below.sa = TensorView::Strided(At(kSa), kF32, {100, 4}, {21'000'000, 1});
    const auto plan = kiln::client::PlanFp8Gemm(below.d, below.a, below.b, below.sa, below.sb, "test");
    REQUIRE(plan.ok());
    CHECK(plan->a_scale_stride == 21'000'000);
  }
  // TMA: 16-byte aligned starts and rows of whole 16 bytes (16 fp8 elements).
  RequireInvalid(with([](Args& x) { x.a = T(kA + 8, kFp8, {100, 400}); }), "a: data pointer");
  RequireInvalid(with([](Args& x) {
                   x.b = TensorView::Strided(At(kB), kFp8, {264, 400}, {408, 1});
                 }),
                 "b: row stride 408 is not a multiple of 16 elements (16 bytes, for TMA)");
  // d must not overlap what the kernel reads while it writes.
  RequireInvalid(with([](Args& x) { x.sa = T(kD + 64, kF32, {100, 4}); }), "overlap");
  RequireInvalid(with([](Args& x) { x.b = T(kD + 256, kFp8, {264, 400}); }), "overlap");
  // M = 0 is OK and launches nothing (no driver needed).
  Args empty;
  empty.a = T(kA, kFp8, {0, 400});
  empty.d = T(kD, DType::kBFloat16, {0, 264});
  empty.sa = T(kSa, kF32, {0, 4});
  CHECK(empty.Call().ok());
}

TEST_CASE("fp8_gemm's heuristic stays in its tactic space, and a forced tactic outside it is refused",
          "[client][ops][validation][gemm]") {
  for (int64_t m : {1, 7, 64, 65, 127, 1000, 4096, 16384})
    for (int64_t n : {8, 264, 4096, 6144, 28672})
      for (int sms : {1, 66, 132}) {
        const kiln::gemm::GemmTactic t = kiln::client::ChooseFp8GemmTactic(m, n, 4096, sms);
        INFO("m " << m << " n " << n << " sms " << sms);
        CHECK(kiln::gemm::Fp8GemmTacticFits(t));
        CHECK(t.stages == kiln::gemm::GemmMaxStages(t.tile_m, t.tile_n, t.split_k));
        if (m <= 64) {
          // Memory-bound: gemm's rule on K steps of 128 (one consumer warp-group: no idle half).
          const kiln::gemm::GemmTactic rule = kiln::client::ChooseMemoryBoundTactic(m, n, 4096 / 128, sms);
          CHECK(kiln::gemm::SameGemmTactic(t, rule));
          CHECK(t.tile_m == 64);
        } else {
          CHECK(t.split_k == 1);
        }
      }
  // Compute-bound shapes get the largest tile; a decode row splits K over clusters so that more
  // blocks stream the weight: 24 tiles of 64 x 256, 4 ways (8 would need 24 clusters of 8 at
  // once; 132 SMs hold 15).
  CHECK(kiln::client::ChooseFp8GemmTactic(4096, 4096, 4096, 132).tile_m == 128);
  CHECK(kiln::client::ChooseFp8GemmTactic(4096, 4096, 4096, 132).tile_n == 256);
  const kiln::gemm::GemmTactic decode = kiln::client::ChooseFp8GemmTactic(1, 6144, 4096, 132);
  CHECK(decode.tile_n == 256);
  CHECK(decode.split_k == 4);
  // Too little K for a split: 4 K steps of 128 at least a block.
  CHECK(kiln::client::ChooseFp8GemmTactic(1, 6144, 512, 132).split_k == 1);

  Args x;
  const auto plan = kiln::client::PlanFp8Gemm(x.d, x.a, x.b, x.sa, x.sb, "test");
  REQUIRE(plan.ok());
  RequireInvalid(kiln::client::LaunchFp8GemmPlan(*plan, {128, 256, 5, 8, 1}, nullptr),
                 "test: tactic t128x256x128s5g8 is not in the fp8_gemm tactic space");  // 5 x 48 KiB
  RequireInvalid(kiln::client::LaunchFp8GemmPlan(*plan, {64, 128, 4, 8, 3}, nullptr),
                 "is not in the fp8_gemm tactic space");  // split 3: not a cluster size
  CHECK(kiln::gemm::Fp8GemmTacticFits({64, 256, kiln::gemm::GemmMaxStages(64, 256, 8), 8, 8}));  // splits are in
  CHECK_FALSE(kiln::gemm::Fp8GemmTacticFits({128, 128, 8, 8, 1}));  // 8 stages of 32 KiB: over 227 KiB
  CHECK(kiln::gemm::Fp8GemmTacticFits({128, 128, 7, 8, 1}));
}

// The GEMV kernel's shapes: M 1 to 16, N a multiple of 16 (a warp's 16 rows of b all inside);
// the rule's: blocks that fit on the SMs.
TEST_CASE("fp8_gemm's GEMV kernel takes M 1 to 16 with N a multiple of 16 and refuses other shapes",
          "[client][ops][validation][gemm]") {
  using kiln::client::Fp8GemmGemvSuits;
  for (int64_t m = 1; m <= kiln::gemm::kFp8GemvMaxRows; ++m) {
    CHECK(Fp8GemmGemvSuits(m, 16));
    CHECK(Fp8GemmGemvSuits(m, 6144));
    CHECK(Fp8GemmGemvSuits(m, 28672));
    CHECK_FALSE(Fp8GemmGemvSuits(m, 264));  // 264 = 16 * 16 + 8
    CHECK_FALSE(Fp8GemmGemvSuits(m, 8));
  }
  CHECK_FALSE(Fp8GemmGemvSuits(0, 4096));
  CHECK_FALSE(Fp8GemmGemvSuits(17, 4096));
  // Where it wins (132 SMs): M 1-16 (one pass: 8 rows, or 16 on the wide entry) while the blocks
  // fit on the SMs at once.
  using kiln::client::Fp8GemmGemvWins;
  for (int64_t m = 1; m <= 16; ++m) {
    CHECK(Fp8GemmGemvWins(m, 6144, 132));         // qkv: 192 blocks of 32 rows
    CHECK(Fp8GemmGemvWins(m, 4096, 132));         // o, down: 256 blocks of 16 rows
    CHECK_FALSE(Fp8GemmGemvWins(m, 28672, 132));  // gate-up: 448 blocks of 64 rows, 264 places
    CHECK_FALSE(Fp8GemmGemvWins(m, 264, 132));
  }
  CHECK(Fp8GemmGemvWins(1, 2 * 64 * 132, 132));
  CHECK_FALSE(Fp8GemmGemvWins(1, 2 * 64 * 132 + 64, 132));
  // Fp8GemmGemv refuses a shape the kernel does not take before it asks for a driver.
  Args x;  // M 100, N 264
  const kiln::Status wide = kiln::client::Fp8GemmGemv(x.d, x.a, x.b, x.sa, x.sb, nullptr);
  RequireInvalid(wide, "kiln::client::Fp8GemmGemv: the fp8 GEMV kernel takes 1 to 16 rows of a");
  CHECK(wide.message().find("found M 100 and N 264") != std::string::npos);
  Args narrow;
  narrow.d = T(kD, DType::kBFloat16, {4, 264});
  narrow.a = T(kA, kFp8, {4, 400});
  narrow.sa = T(kSa, kF32, {4, 4});
  RequireInvalid(kiln::client::Fp8GemmGemv(narrow.d, narrow.a, narrow.b, narrow.sa, narrow.sb, nullptr),
                 "found M 4 and N 264");
  // Its arguments are fp8_gemm's, checked the same way.
  Args bad;
  bad.a = T(kA, DType::kBFloat16, {100, 400});
  RequireInvalid(kiln::client::Fp8GemmGemv(bad.d, bad.a, bad.b, bad.sa, bad.sb, nullptr), "a:");
}

}  // namespace
