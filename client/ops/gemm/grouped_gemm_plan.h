// GroupedGemmPlan: the arguments of kiln::ops::grouped_gemm (contiguous layout) and
// kiln::ops::grouped_gemm_masked, and of their block-scaled fp8 forms grouped_fp8_gemm and
// grouped_fp8_gemm_masked, validated and turned into what the launch needs, and the
// default tactic (ChooseGroupedGemmTactic, gemm_plan.h: the family's heuristics live together). Pure: no driver call,
// so every check and the heuristic run (and are tested) without a GPU. The groups' rows are device data: the plan knows
// only their bounds.
#pragma once

#include <cstdint>

#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

struct GroupedGemmPlan {
  const char* api = "";
  bool masked = false;
  DType dtype = DType::kBFloat16;      // a, b
  DType out_dtype = DType::kBFloat16;  // d
  int device = 0;
  int groups = 0;            // E
  int64_t rows = 0;          // rows of d (and of a unless gathered) in all: contiguous T, masked E * M_max
  int64_t group_stride = 0;  // masked: M_max
  int64_t n = 0;             // b's rows per group
  int64_t k = 0;
  // The silu_and_mul epilogue (gemm::kSiluAndMulEpilogue; contiguous only): b's n rows per group
  // are [gate; up] and d has n / 2 columns, silu(gate) * up; on fp8 inputs as e4m3 codes
  // (out_dtype fp8_e4m3) with their scales in d_scales.
  bool silu_and_mul = false;
  // How the kernel stores D: by the rows a group has (GroupedGemmStoresThroughTma, gemm_plan.h),
  // or forced either way (the tests, which cover both stores on small groups).
  enum class Stores { kByRows, kThroughTma, kFromRegisters };
  Stores stores = Stores::kByRows;
  const void* a = nullptr;              // [rows, k]
  const void* b = nullptr;              // [E * n, k]
  void* d = nullptr;                    // [rows, n]
  const int32_t* group_rows = nullptr;  // contiguous: m_indptr [E + 1]; masked: masked_m [E]
  int64_t a_row_stride = 0;
  int64_t b_row_stride = 0;
  int64_t d_row_stride = 0;
  // fp8 (dtype fp8_e4m3; null otherwise): a row of scales per row of a, [rows, ceil(k / 128)],
  // and ceil(n / 128) rows per group, [E * ceil(n / 128), ceil(k / 128)].
  const float* a_scales = nullptr;
  const float* b_scales = nullptr;
  int64_t a_scale_stride = 0;
  int64_t b_scale_stride = 0;
  // fp8 silu_and_mul (null otherwise): d's scales [rows, (n / 2) / 128], rows d_scale_stride apart.
  float* d_scales = nullptr;
  int64_t d_scale_stride = 0;
  // A's rows gathered (contiguous only; null: a's rows in place): row r of the groups is row
  // a_rows[r] / a_row_divisor of a, which has a_source_rows rows (fp8: a_scales one per row of a);
  // an entry outside [0, a_source_rows * a_row_divisor) reads zeros (gemm_contract.h, GemmParams).
  const int32_t* a_rows = nullptr;
  int a_row_divisor = 1;
  int64_t a_source_rows = 0;
};

// The row table of a gathered A (the Plan functions' `gather`): a_rows int32 [T] (T = d's rows, a
// device vector) and the divisor of its entries, 1..2^31 - 1 (fused_moe: row_to_slot and top_k).
// a is then [S, K], any S >= 1 rows, and a_scales (fp8) [S, ceil(K / 128)].
struct GroupedGemmGather {
  const TensorView* a_rows = nullptr;
  int64_t divisor = 1;
};

// contiguous: d [T, N], a [T, K], b [E, N, K], m_indptr [E + 1] int32 (device). The contiguous
// forms take `gather` (GroupedGemmGather): a's rows by a row table, a [S, K].
// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
StatusOr<GroupedGemmPlan> PlanGroupedGemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                          const TensorView& m_indptr, const char* api,
                                          const GroupedGemmGather* gather = nullptr);
// contiguous with the silu_and_mul epilogue (fused_moe's gate-and-up GEMM): b [E, N, K] with
// each group's rows [gate; up] (N a multiple of 16), d [T, N / 2] = silu(a . gate^T) * (a . up^T).
StatusOr<GroupedGemmPlan> PlanGroupedGemmSiluAndMul(const TensorView& d, const TensorView& a, const TensorView& b,
                                                    const TensorView& m_indptr, const char* api,
                                                    const GroupedGemmGather* gather = nullptr);
// masked: d [E, M_max, N], a [E, M_max, K], b [E, N, K], masked_m [E] int32 (device).
StatusOr<GroupedGemmPlan> PlanGroupedGemmMasked(const TensorView& d, const TensorView& a, const TensorView& b,
                                                const TensorView& masked_m, const char* api);
// The fp8 forms: a and b fp8_e4m3 (K a multiple of 16), d bf16 or fp32, a_scales fp32 with a's
// leading dims and ceil(K / 128) last, b_scales fp32 [E, ceil(N / 128), ceil(K / 128)].
StatusOr<GroupedGemmPlan> PlanGroupedFp8Gemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                             const TensorView& a_scales, const TensorView& b_scales,
                                             const TensorView& m_indptr, const char* api,
                                             const GroupedGemmGather* gather = nullptr);
// contiguous fp8 with the silu_and_mul epilogue into e4m3 (fused_moe_fp8's gate-and-up GEMM): b [E,
// N, K] e4m3 with each group's rows [gate; up] (N / 2 a multiple of 128: a tile's 128 columns of d
// are one scale group and the up rows start a scale block of b), d [T, N / 2] e4m3 codes and
// d_scales [T, N / 256] fp32, quantized per row and 128 columns by fused_moe_fp8's rule
// (kiln/moe/moe_contract.h).
StatusOr<GroupedGemmPlan> PlanGroupedFp8GemmSiluAndMul(const TensorView& d, const TensorView& d_scales,
                                                       const TensorView& a, const TensorView& b,
                                                       const TensorView& a_scales, const TensorView& b_scales,
                                                       const TensorView& m_indptr, const char* api,
                                                       const GroupedGemmGather* gather = nullptr);
StatusOr<GroupedGemmPlan> PlanGroupedFp8GemmMasked(const TensorView& d, const TensorView& a, const TensorView& b,
                                                   const TensorView& a_scales, const TensorView& b_scales,
                                                   const TensorView& masked_m, const char* api);

}  // namespace kiln::client
