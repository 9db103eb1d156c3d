// Fp8GemmPlan: the arguments of kiln::ops::fp8_gemm validated and turned into what the launch
// needs, and fp8_gemm's default tactic. Pure: no driver call, so every check and the heuristic
// run (and are tested) without a GPU.
#pragma once

#include <cstdint>

#include "client/ops/row_view.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

struct Fp8GemmPlan {
  const char* api = "";
  DType out_dtype = DType::kBFloat16;  // d
  int device = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  const void* a = nullptr;          // [m, k] e4m3
  const void* b = nullptr;          // [n, k] e4m3
  void* d = nullptr;                // [m, n]
  const float* a_scales = nullptr;  // [m, ceil(k / 128)]
  const float* b_scales = nullptr;  // [ceil(n / 128), ceil(k / 128)]
  int64_t a_row_stride = 0;
  int64_t b_row_stride = 0;
  int64_t d_row_stride = 0;
  int64_t a_scale_stride = 0;
  int64_t b_scale_stride = 0;
};

// What fp8_gemm and the grouped fp8 ops check alike: a and b fp8_e4m3, d bf16 or fp32
// (INVALID_ARGUMENT naming the argument).
Status CheckFp8GemmDTypes(const TensorView& d, const TensorView& a, const TensorView& b);
// `scales` fp32 with a's leading dims and ceil(K / 128) last, on a's device, seen as rows (one
// per row of a). INVALID_ARGUMENT "a_scales: ..." otherwise.
StatusOr<RowView> ViewAScales(const TensorView& scales, const TensorView& a, int64_t k);
// The row stride, in elements, at which the gemm kernels read `scales` (its own, or `k_blocks` for
// a single row). They read a scale at a 32-bit element offset (row x row stride + block of K,
// found once per tile: kiln/gemm/gemm_sm90.cuh), so INVALID_ARGUMENT "<name>: ..." when the rows
// span 2^31 elements or more (only a view into a far larger buffer can: the scales of a real
// operand are 1/128 of its size).
StatusOr<int64_t> KernelScaleStride(const RowView& scales, int64_t k_blocks, const char* name);

// d [..., N], a [..., K], b [N, K], a_scales [..., ceil(K / 128)] (a's leading dims), b_scales
// [ceil(N / 128), ceil(K / 128)] (kiln/ops/gemm.h). INVALID_ARGUMENT "<api>: <argument>:
// <expected>, found <found>" on the first problem. `api` must outlive the plan.
StatusOr<Fp8GemmPlan> PlanFp8Gemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                  const TensorView& a_scales, const TensorView& b_scales, const char* api);

// fp8_gemm's default tactic on a device of `sms` multiprocessors, with no tuning: for M <= 64
// gemm's memory-bound rule on fp8's K steps of 128 (ChooseMemoryBoundTactic: tile_m 64, K split
// over a cluster when the tiles fit in one wave); above, the tile of least predicted time (waves
// of tiles x the tile's area over its measured relative throughput, fp8_gemm_plan.cpp:
// kFp8TileThroughput), no split, the most stages that fit, raster groups of 8.
gemm::GemmTactic ChooseFp8GemmTactic(int64_t m, int64_t n, int64_t k, int sms);

}  // namespace kiln::client
