// GemmPlan: the arguments of kiln::ops::gemm validated and turned into what the launch needs
// (pointers, M/N/K, row strides, beta) and the default tactic for the shape. Pure: no driver
// call, so every check and the heuristic run (and are tested) without a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

struct GemmPlan {
  const char* api = "";
  DType dtype = DType::kBFloat16;      // a, b, bias
  DType out_dtype = DType::kBFloat16;  // d, c
  int device = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  const void* c = nullptr;  // null: no beta · c (also when beta is 0)
  const void* bias = nullptr;
  int64_t a_row_stride = 0;
  int64_t b_row_stride = 0;
  int64_t d_row_stride = 0;
  int64_t c_row_stride = 0;
  float beta = 0;
};

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
// `api` must outlive the plan (a string literal).
StatusOr<GemmPlan> PlanGemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView* bias,
                            const TensorView* c, double beta, const char* api);

// The default tactic of a shape, with no tuning, on a device of `sms` multiprocessors: the
// tile and split_k of least predicted time, waves of clusters x K steps per block (+ the
// split's reduction) x the tile's cost per step, where
//  - M <= 64 (memory-bound: the weight must stream at HBM speed): tile_m 64, a step costs
//    tile_n, more when the stages hold less than 128 KiB of B (a block is then latency-bound);
//  - larger M: a step costs the tile's area over its measured relative throughput
//    (gemm_plan.cpp: kTileThroughput);
// each split block has at least 4 K steps; then the most stages that fit, raster groups of 8.
gemm::GemmTactic ChooseGemmTactic(int64_t m, int64_t n, int64_t k, int sms);

// Every tactic of the space that suits the shape, in the order the heuristic prefers them (the
// first is ChooseGemmTactic's): tiles and splits by the rule above (for M <= 64 the 128-row
// tiles last), then per tile the most stages down to 2, each with group_m 8 first. A blocklist
// (KILN_TACTIC_BLOCKLIST) takes the first it does not block.
std::vector<gemm::GemmTactic> RankGemmTactics(int64_t m, int64_t n, int64_t k, int sms);

}  // namespace kiln::client
