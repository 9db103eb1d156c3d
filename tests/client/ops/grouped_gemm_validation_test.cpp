// kiln::ops::grouped_gemm and grouped_gemm_masked refuse every bad argument before touching the
// driver, naming the argument, what was expected and what was found; the plan carries what the
// kernel takes; the grouped heuristic (ChooseGroupedGemmTactic) picks what docs/kernels-gemm.md
// says. Without a GPU: the pointers are never dereferenced.
#include <catch2/catch.hpp>

#include <string>

#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/grouped_gemm_ops.h"
#include "client/ops/gemm/grouped_gemm_plan.h"
#include "kiln/ops/gemm.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;

constexpr uintptr_t kA = 0x7f0000000000;  // fake device addresses, far apart
constexpr uintptr_t kB = kA + (uintptr_t{1} << 34);
constexpr uintptr_t kD = kA + (uintptr_t{2} << 34);
constexpr uintptr_t kRows = kA + (uintptr_t{3} << 34);
const DType kBf16 = DType::kBFloat16;

void* At(uintptr_t address) { return reinterpret_cast<void*>(address); }
TensorView T(uintptr_t address, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::Contiguous(At(address), dtype, shape);
}

using kiln::testing::RequireInvalid;

TEST_CASE("grouped_gemm refuses bad shapes, dtypes, tables and group counts", "[client][ops][validation][gemm]") {
  const TensorView a = T(kA, kBf16, {100, 64}), b = T(kB, kBf16, {4, 128, 64}), d = T(kD, kBf16, {100, 128});
  const TensorView indptr = T(kRows, DType::kInt32, {5});
  auto call = [](const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& t) {
    return kiln::ops::grouped_gemm(d, a, b, t);
  };
  RequireInvalid(call(d, T(kA, kBf16, {2, 50, 64}), b, indptr),
                 "kiln::ops::grouped_gemm: a: expected a 2-D tensor [T, K] (the rows of every group), found rank 3");
  RequireInvalid(call(d, a, T(kB, kBf16, {512, 64}), indptr), "b: expected a 3-D tensor [E, N, K], found rank 2");
  RequireInvalid(call(d, a, b, T(kRows, DType::kInt32, {4})),
                 "m_indptr: expected shape [5] (E + 1: group e is rows m_indptr[e] .. m_indptr[e + 1] - 1), found "
                 "rank 1 [4]");
  RequireInvalid(call(d, a, b, T(kRows, DType::kInt64, {5})), "m_indptr: expected dtype int32, found int64");
  RequireInvalid(call(d, a, b, TensorView::Strided(At(kRows), DType::kInt32, {5}, {2})),
                 "m_indptr: must be contiguous (stride 1), found stride 2");
  RequireInvalid(call(d, a, T(kB, kBf16, {257, 128, 64}), T(kRows, DType::kInt32, {258})),
                 "b: E (the groups) must be 1..256, found 257");
  RequireInvalid(call(d, a, T(kB, kBf16, {4, 128, 72}), indptr), "b: expected shape [E, N, 64] (K = a's last dim)");
  RequireInvalid(call(d, T(kA, kBf16, {100, 60}), T(kB, kBf16, {4, 128, 60}), indptr),
                 "a: K (the last dim) must be a positive multiple of 8");
  RequireInvalid(call(T(kD, kBf16, {100, 124}), a, T(kB, kBf16, {4, 124, 64}), indptr),
                 "b: N (dim 1) must be a positive multiple of 8, found 124");
  RequireInvalid(call(T(kD, kBf16, {99, 128}), a, b, indptr), "d: expected 100 rows (a's T)");
  RequireInvalid(call(d, a, T(kB, DType::kFloat16, {4, 128, 64}), indptr), "b: expected dtype bf16 (a's), found fp16");
  RequireInvalid(call(T(kD, DType::kInt32, {100, 128}), a, b, indptr),
                 "d: dtype int32 is not supported; expected bf16, fp16 or fp32");
  RequireInvalid(call(d, T(kA + 2, kBf16, {100, 64}), b, indptr), "a: data pointer");
  // d over the table: the kernel reads the table while d is written.
  RequireInvalid(call(d, a, b, T(kD + 64, DType::kInt32, {5})), "overlap");
}

TEST_CASE("grouped_gemm_masked refuses bad shapes and tables", "[client][ops][validation][gemm]") {
  const TensorView a = T(kA, kBf16, {4, 32, 64}), b = T(kB, kBf16, {4, 128, 64}), d = T(kD, kBf16, {4, 32, 128});
  const TensorView masked_m = T(kRows, DType::kInt32, {4});
  auto call = [](const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& t) {
    return kiln::ops::grouped_gemm_masked(d, a, b, t);
  };
  REQUIRE(kiln::client::PlanGroupedGemmMasked(d, a, b, masked_m, "test").ok());
  RequireInvalid(call(d, T(kA, kBf16, {128, 64}), b, masked_m),
                 "kiln::ops::grouped_gemm_masked: a: expected a 3-D tensor [E, M_max, K], found rank 2");
  RequireInvalid(call(d, T(kA, kBf16, {3, 32, 64}), b, masked_m), "a: expected E = 4 (b's dim 0) first");
  RequireInvalid(call(T(kD, kBf16, {4, 31, 128}), a, b, masked_m), "d: expected [4, 32, N] (a's E and M_max)");
  RequireInvalid(call(d, a, b, T(kRows, DType::kInt32, {5})),
                 "masked_m: expected shape [4] (E: the valid rows of each group), found rank 1 [5]");
}

TEST_CASE("grouped_gemm plans what the kernel takes, and its default tiles", "[client][ops][gemm]") {
  const TensorView a = T(kA, kBf16, {100, 64}), b = T(kB, kBf16, {4, 128, 64});
  const TensorView d = TensorView::Strided(At(kD), DType::kFloat32, {100, 128}, {136, 1});
  auto plan = kiln::client::PlanGroupedGemm(d, a, b, T(kRows, DType::kInt32, {5}), "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(!plan->masked);
  CHECK(plan->groups == 4);
  CHECK(plan->rows == 100);
  CHECK(plan->n == 128);
  CHECK(plan->k == 64);
  CHECK(plan->d_row_stride == 136);
  CHECK(plan->b_row_stride == 64);
  CHECK(plan->group_rows == At(kRows));
  auto masked = kiln::client::PlanGroupedGemmMasked(T(kD, kBf16, {4, 32, 128}), T(kA, kBf16, {4, 32, 64}), b,
                                                    T(kRows, DType::kInt32, {4}), "test");
  REQUIRE(masked.ok());
  CHECK(masked->masked);
  CHECK(masked->rows == 128);
  CHECK(masked->group_stride == 32);
  // A tactic outside grouped_gemm's space (a split) is refused before anything runs.
  RequireInvalid(kiln::client::LaunchGroupedGemmPlan(*plan, {64, 128, 8, 8, 2}, nullptr),
                 "test: tactic 64x128 with 8 stages, group_m 8, split_k 2 is not in the grouped_gemm tactic space");

  using kiln::client::ChooseGroupedGemmTactic;
  // Decode-like groups (<= 64 rows): one consumer; the masked layout's weight streaming 64 x 128
  // (64 x 256 ranked first by throughput was slower there), the contiguous layout's the ranking's.
  CHECK(ChooseGroupedGemmTactic(16, 128, 1536, 2048, 132, /*masked=*/false).tile_m == 64);
  CHECK(ChooseGroupedGemmTactic(16, 128, 1536, 2048, 132, /*masked=*/false).tile_n == 256);
  for (int64_t rows : {1, 16, 64}) {
    const auto masked_decode = ChooseGroupedGemmTactic(rows, 128, 1536, 2048, 132, /*masked=*/true);
    CHECK(masked_decode.tile_m == 64);
    CHECK(masked_decode.tile_n == 128);
    CHECK(masked_decode.stages == kiln::gemm::GemmMaxStages(64, 128, 1, true));
  }
  CHECK(ChooseGroupedGemmTactic(65, 128, 1536, 2048, 132, /*masked=*/true).tile_m == 128);  // ranked again
  // Mixtral prefill: 8 experts of ~1024 rows, N 28672: the big tile.
  const auto mixtral = ChooseGroupedGemmTactic(1024, 8, 28672, 4096, 132, /*masked=*/false);
  CHECK(mixtral.tile_m == 128);
  CHECK(mixtral.tile_n == 256);
  CHECK(mixtral.split_k == 1);
  for (int64_t rows : {1, 64, 65, 256, 4096})
    for (int groups : {1, 8, 128, 256})
      for (bool masked : {false, true})
        CHECK(kiln::gemm::GemmTacticFits(ChooseGroupedGemmTactic(rows, groups, 1536, 2048, 132, masked), true));
}

TEST_CASE("grouped_fp8_gemm and grouped_fp8_gemm_masked refuse bad dtypes, K and scales",
          "[client][ops][validation][gemm]") {
  const DType fp8 = DType::kFloat8E4M3, f32 = DType::kFloat32;
  constexpr uintptr_t kSa = kA + (uintptr_t{4} << 34), kSb = kA + (uintptr_t{5} << 34);
  // T 100, E 4, N 264, K 400: kb 4, nb 3.
  const TensorView a = T(kA, fp8, {100, 400}), b = T(kB, fp8, {4, 264, 400}), d = T(kD, kBf16, {100, 264});
  const TensorView sa = T(kSa, f32, {100, 4}), sb = T(kSb, f32, {4, 3, 4});
  const TensorView indptr = T(kRows, DType::kInt32, {5});
  const auto plan = kiln::client::PlanGroupedFp8Gemm(d, a, b, sa, sb, indptr, "test");
  REQUIRE(plan.ok());
  CHECK(plan->dtype == fp8);
  CHECK(plan->a_scales == At(kSa));
  CHECK(plan->b_scales == At(kSb));
  CHECK(plan->a_scale_stride == 4);
  CHECK(plan->b_scale_stride == 4);  // b_scales [E, nb, kb] as E * nb rows
  auto call = [&](const TensorView& d2, const TensorView& a2, const TensorView& b2, const TensorView& sa2,
                  const TensorView& sb2) { return kiln::ops::grouped_fp8_gemm(d2, a2, b2, sa2, sb2, indptr); };
  RequireInvalid(call(d, T(kA, kBf16, {100, 400}), b, sa, sb),
                 "kiln::ops::grouped_fp8_gemm: a: dtype bf16 is not supported; expected fp8_e4m3");
  RequireInvalid(call(T(kD, DType::kFloat16, {100, 264}), a, b, sa, sb), "d: dtype fp16 is not supported");
  RequireInvalid(call(d, T(kA, fp8, {100, 392}), T(kB, fp8, {4, 264, 392}), sa, sb),
                 "a: K (the last dim) must be a positive multiple of 16");
  RequireInvalid(call(d, a, b, T(kSa, f32, {100, 3}), sb), "a_scales: expected a's leading dims and ceil(K / 128) = 4");
  RequireInvalid(call(d, a, b, sa, T(kSb, f32, {12, 4})),
                 "b_scales: expected a 3-D tensor [E, ceil(N / 128), ceil(K / 128)] = [4, 3, 4], found rank 2");
  RequireInvalid(call(d, a, b, sa, T(kSb, f32, {4, 2, 4})),
                 "b_scales: expected shape [E, ceil(N / 128), ceil(K / 128)]");
  RequireInvalid(call(d, a, b, sa, T(kSb, DType::kBFloat16, {4, 3, 4})), "b_scales: expected dtype fp32, found bf16");
  RequireInvalid(call(d, a, b, T(kD + 64, f32, {100, 4}), sb), "overlap");
  // Scales read at 32-bit offsets: rows spanning 2^31 elements are refused.
  RequireInvalid(call(d, a, b, TensorView::Strided(At(kSa), f32, {100, 4}, {22'000'000, 1}), sb),
                 "a_scales: its 100 rows 22000000 elements apart span 2178000004 elements");
  // The bf16 op refuses fp8 inputs (they need scales: the fp8 op).
  RequireInvalid(kiln::ops::grouped_gemm(d, a, b, indptr), "a: dtype fp8_e4m3 is not supported; expected bf16 or fp16");

  // masked: a_scales has a's [E, M_max] leading dims.
  const TensorView am = T(kA, fp8, {4, 32, 400}), dm = T(kD, kBf16, {4, 32, 264});
  const TensorView masked_m = T(kRows, DType::kInt32, {4});
  REQUIRE(kiln::client::PlanGroupedFp8GemmMasked(dm, am, b, T(kSa, f32, {4, 32, 4}), sb, masked_m, "test").ok());
  RequireInvalid(kiln::ops::grouped_fp8_gemm_masked(dm, am, b, T(kSa, f32, {128, 4}), sb, masked_m),
                 "kiln::ops::grouped_fp8_gemm_masked: a_scales: expected a's leading dims");
  // A forced tactic outside the grouped space (a split) is refused, naming the op.
  RequireInvalid(kiln::client::LaunchGroupedGemmPlan(*plan, {64, 128, 4, 8, 2}, nullptr),
                 "is not in the grouped_fp8_gemm tactic space");
}

TEST_CASE("grouped fp8 with the silu_and_mul epilogue into e4m3 plans codes and scales, and refuses what its tiles "
          "cannot quantize",
          "[client][ops][validation][gemm]") {
  const DType fp8 = DType::kFloat8E4M3, f32 = DType::kFloat32;
  constexpr uintptr_t kSa = kA + (uintptr_t{4} << 34), kSb = kA + (uintptr_t{5} << 34), kSd = kA + (uintptr_t{6} << 34);
  // T 100, E 4, N 768 ([gate; up] of I 384), K 400: kb 4, nb 6; d [100, 384] and 3 scales a row.
  const TensorView a = T(kA, fp8, {100, 400}), b = T(kB, fp8, {4, 768, 400}), d = T(kD, fp8, {100, 384});
  const TensorView sa = T(kSa, f32, {100, 4}), sb = T(kSb, f32, {4, 6, 4}), sd = T(kSd, f32, {100, 3});
  const TensorView indptr = T(kRows, DType::kInt32, {5});
  const auto plan = [&](const TensorView& d2, const TensorView& sd2, const TensorView& b2, const TensorView& sb2) {
    return kiln::client::PlanGroupedFp8GemmSiluAndMul(d2, sd2, a, b2, sa, sb2, indptr, "fused");
  };
  const auto status = [&](const TensorView& d2, const TensorView& sd2, const TensorView& b2, const TensorView& sb2) {
    return plan(d2, sd2, b2, sb2).status();
  };
  const auto ok = plan(d, sd, b, sb);
  REQUIRE(ok.ok());
  CHECK(ok->silu_and_mul);
  CHECK(ok->out_dtype == fp8);
  CHECK(ok->n == 768);
  CHECK(ok->d_scales == At(kSd));
  CHECK(ok->d_scale_stride == 3);
  CHECK(plan(d, TensorView::Strided(At(kSd), f32, {100, 3}, {8, 1}), b, sb)->d_scale_stride == 8);
  // I = 320: a tile's 128 columns would cross from one scale group (and one scale block of b's up
  // rows) into the next.
  RequireInvalid(status(T(kD, fp8, {100, 320}), T(kSd, f32, {100, 3}), T(kB, fp8, {4, 640, 400}),
                        T(kSb, f32, {4, 5, 4})),
                 "fused: b: N / 2 (the gate rows of a group) must be a multiple of 128 (a tile's 128 columns of d are "
                 "one scale group, and the up rows start a scale block of b), found 320");
  RequireInvalid(status(T(kD, kBf16, {100, 384}), sd, b, sb),
                 "d: expected dtype fp8_e4m3 (the codes of silu(gate) * up), found bf16");
  RequireInvalid(status(T(kD, fp8, {100, 768}), sd, b, sb), "d: expected N / 2 = 384 (b's dim 1, halved) last");
  RequireInvalid(status(d, T(kSd, f32, {100, 6}), b, sb), "d_scales: expected shape [100, 3] (d's rows, N / 2 / 128)");
  RequireInvalid(status(d, T(kSd, DType::kBFloat16, {100, 3}), b, sb), "d_scales: expected dtype fp32, found bf16");
  RequireInvalid(status(d, T(kD + 64, f32, {100, 3}), b, sb), "overlap");
  RequireInvalid(status(d, T(kSa + 16, f32, {100, 3}), b, sb), "overlap");
  RequireInvalid(status(d, T(kRows, f32, {100, 3}), b, sb), "d_scales");
}

TEST_CASE("the contiguous grouped plans gather A's rows through a table, and refuse a bad table or divisor",
          "[client][ops][validation][gemm]") {
  const DType fp8 = DType::kFloat8E4M3, f32 = DType::kFloat32;
  constexpr uintptr_t kSa = kA + (uintptr_t{4} << 34), kSb = kA + (uintptr_t{5} << 34), kSd = kA + (uintptr_t{6} << 34);
  constexpr uintptr_t kMap = kA + (uintptr_t{7} << 34);
  // 30 source rows, 240 rows of the groups (top 8), E 4, N 768, K 400.
  const TensorView a = T(kA, kBf16, {30, 400}), b = T(kB, kBf16, {4, 768, 400}), d = T(kD, kBf16, {240, 768});
  const TensorView indptr = T(kRows, DType::kInt32, {5}), map = T(kMap, DType::kInt32, {240});
  const kiln::client::GroupedGemmGather by_slot{&map, 8};
  const auto plain = kiln::client::PlanGroupedGemm(d, a, b, indptr, "gathered", &by_slot);
  REQUIRE(plain.ok());
  CHECK(plain->rows == 240);
  CHECK(plain->a_source_rows == 30);
  CHECK(plain->a_rows == At(kMap));
  CHECK(plain->a_row_divisor == 8);
  // Without a table: a's rows are d's, as always.
  RequireInvalid(kiln::client::PlanGroupedGemm(d, a, b, indptr, "in place").status(), "d: expected 30 rows (a's T)");
  CHECK(kiln::client::PlanGroupedGemm(T(kD, kBf16, {30, 768}), a, b, indptr, "in place")->a_rows == nullptr);
  const TensorView d_half = T(kD, kBf16, {240, 384});
  const auto silu = kiln::client::PlanGroupedGemmSiluAndMul(d_half, a, b, indptr, "gathered", &by_slot);
  REQUIRE(silu.ok());
  CHECK(silu->silu_and_mul);
  CHECK(silu->a_row_divisor == 8);
  // fp8: a_scales a row per source row.
  const TensorView a8 = T(kA, fp8, {30, 400}), b8 = T(kB, fp8, {4, 768, 400}), sa = T(kSa, f32, {30, 4}),
                   sb = T(kSb, f32, {4, 6, 4});
  const auto codes = kiln::client::PlanGroupedFp8GemmSiluAndMul(T(kD, fp8, {240, 384}), T(kSd, f32, {240, 3}), a8, b8,
                                                                sa, sb, indptr, "gathered", &by_slot);
  REQUIRE(codes.ok());
  CHECK(codes->a_source_rows == 30);
  CHECK(codes->rows == 240);
  const auto fp8_plain = kiln::client::PlanGroupedFp8Gemm(d, a8, b8, sa, sb, indptr, "gathered", &by_slot);
  REQUIRE(fp8_plain.ok());
  RequireInvalid(
      kiln::client::PlanGroupedFp8Gemm(d, a8, b8, T(kSa, f32, {240, 4}), sb, indptr, "gathered", &by_slot).status(),
      "a_scales: expected a's leading dims");
  // The table: shape, dtype, stride, alignment, overlap with d (or d_scales), divisor.
  const auto refuse = [&](const kiln::client::GroupedGemmGather& g, const std::string& want) {
    RequireInvalid(kiln::client::PlanGroupedGemm(d, a, b, indptr, "gathered", &g).status(), want);
  };
  const TensorView short_map = T(kMap, DType::kInt32, {239}), long_map = T(kMap, DType::kInt32, {240});
  refuse({&short_map, 8}, "gathered: a_rows: expected shape [240] (d's rows: row r of the groups is row a_rows[r] / "
                          "divisor of a), found rank 1 [239]");
  const TensorView wide = T(kMap, DType::kInt64, {240});
  refuse({&wide, 8}, "a_rows: expected dtype int32, found int64");
  const TensorView strided = TensorView::Strided(At(kMap), DType::kInt32, {240}, {2});
  refuse({&strided, 8}, "a_rows: must be contiguous (stride 1), found stride 2");
  const TensorView odd = T(kMap + 2, DType::kInt32, {240});
  refuse({&odd, 8}, "a_rows: data pointer");
  refuse({&long_map, 0}, "a_rows: the divisor of its entries must be 1..2147483647, found 0");
  refuse({&long_map, int64_t{1} << 31}, "found 2147483648");
  refuse({nullptr, 8}, "a_rows: the gathered A's row table is missing (NULL)");
  const TensorView inside_d = T(kD + 256, DType::kInt32, {240});
  refuse({&inside_d, 8}, "overlap");
  RequireInvalid(kiln::client::PlanGroupedGemm(d, T(kA, kBf16, {0, 400}), b, indptr, "gathered", &by_slot).status(),
                 "a: a gathered A needs at least one row where d has rows");
  // No rows at all (T 0): planned, nothing to launch.
  const TensorView no_rows = T(kMap, DType::kInt32, {0});
  const kiln::client::GroupedGemmGather none{&no_rows, 8};
  CHECK(kiln::client::PlanGroupedGemm(T(kD, kBf16, {0, 768}), T(kA, kBf16, {0, 400}), b, indptr, "empty", &none).ok());
  RequireInvalid(kiln::client::PlanGroupedFp8GemmSiluAndMul(T(kD, fp8, {240, 384}), T(kMap + 512, f32, {240, 3}), a8,
                                                            b8, sa, sb, indptr, "gathered", &by_slot)
                     .status(),
                 "d_scales");
}

}  // namespace
