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

struct RowView;

// INVALID_ARGUMENT "<name>: ..." unless TMA can read the view: a 16-byte aligned start and a row
// stride of whole 16 bytes (kAlignElements 16-bit elements, 16 fp8 ones).
Status CheckTmaOperand(const RowView& v);
// INVALID_ARGUMENT "<name>: ..." unless the view can be accessed as pairs of elements (d, c,
// bias): aligned to two elements, an even row stride.
Status CheckPairOperand(const RowView& v);
// What gemm and the grouped ops check alike: a and b bf16 or fp16 and equal, d bf16, fp16 or
// fp32; and the layout: a and b readable by TMA, d by pairs with rows at least N apart, d apart
// from a and b. INVALID_ARGUMENT naming the argument.
Status CheckGemmDTypes(const TensorView& d, const TensorView& a, const TensorView& b);
Status CheckGemmLayout(const RowView& d, const RowView& a, const RowView& b, int64_t n);
// The shapes of a dense product (gemm, fp8_gemm), a [..., K] and d [..., N] seen as rows, b [N, K]:
// b's K is a's, d has a's leading dims and N last, K whole 16-byte rows (8 16-bit elements, 16
// fp8 ones) and N a multiple of 8, M, N and K below 2^31, b and d on a's device.
Status CheckDenseGemmShapes(const TensorView& d_t, const TensorView& a_t, const TensorView& b_t, const RowView& a,
                            const RowView& b, const RowView& d);

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

// The default tactic of a shape, with no tuning, on a device of `sms` multiprocessors:
//  - M <= 64 (memory-bound: the weight must stream at HBM speed): tile_m 64 and tile_n 256
//    up to M 16, 64 above; when those tiles fit in one wave, K split over the largest cluster
//    (2, 4, 8) whose clusters all run at once (GemmClusterSlots), each block keeping at least 4
//    K steps; with more tiles than SMs, no split and the tile_n that fills the waves best;
//  - larger M: the tile and split of least predicted time, waves of clusters x K steps per
//    block (+ the split's reduction) x the tile's area over its measured relative throughput
//    (gemm_plan.cpp: kTileThroughput), more with fewer than 4 stages (a split's partial tile
//    takes shared memory from the stages), a split only where the tile's tiles do not fill
//    the SMs;
// then the most stages that fit, raster groups of 8; from M 4096 on a 128 x 256 tile runs as B
// multicast pairs (multicast 2: measured 1-2.5 % faster there).
gemm::GemmTactic ChooseGemmTactic(int64_t m, int64_t n, int64_t k, int sms);

// The rule above for M <= 64 alone, on `k_steps` pipeline stages of K (gemm: K / 64; fp8_gemm:
// K / 128): the tile by M and, when its tiles fit in one wave, the largest split whose clusters
// all run at once with at least 4 K steps a block. fp8_gemm's heuristic takes it for M <= 64.
gemm::GemmTactic ChooseMemoryBoundTactic(int64_t m, int64_t n, long long k_steps, int sms);

// Every tactic of the space that suits the shape, in the order the heuristic prefers them (the
// first is ChooseGemmTactic's; its multicast pair from M 4096 on is the only multicast tactic
// there): tiles and splits by the rule above (for M <= 64 the 128-row tiles last), then per tile
// the most stages down to 2, each with group_m 8 first. A blocklist (KILN_TACTIC_BLOCKLIST)
// takes the first it does not block.
std::vector<gemm::GemmTactic> RankGemmTactics(int64_t m, int64_t n, int64_t k, int sms);

// The default tactic for `groups` groups of about `rows_per_group` rows each (contiguous: T / E;
// masked: M_max, the capacity) on `sms` SMs, with no tuning: tile_m 64 up to 64 rows a group,
// else the tile of least predicted time (waves of the groups' tiles x the tile's area over its
// relative throughput, as gemm's), the most stages, raster groups of 8; never a split. The masked
// layout up to 64 rows a group (a decode step: every group's weights streamed once, bound by
// memory, not by the tensor cores the throughput table ranks) takes 64 x 128: on an H100
// (2026-12-07, bench/results/2026-12-07-h100-fp8-quantize.md) 1.3-7.3 % faster than the ranked
// 64 x 256 on six of seven decode shapes (fp8 and bf16, Qwen3-30B-A3B and DeepSeek-V3), 1 %
// slower on Mixtral's bf16 w13 at M_max 64.
gemm::GemmTactic ChooseGroupedGemmTactic(int64_t rows_per_group, int groups, int64_t n, int64_t k, int sms,
                                         bool masked);

// Whether a grouped product stores D through TMA by default (where the tactic has the staging
// buffers): from kGroupedTmaStoreMinRows rows a group on. Measured on the H100 (2026-12-05,
// bench/results/2026-12-05-grouped-tma-store.md): 2.8-4.0 % faster at Mixtral-8x7B's 1024 rows
// a group (w13, w2, fused_moe prefill), 24 % slower at Qwen3-30B-A3B's 256 (w13, K 2048), where
// each group's weights serve few rows (the stores, we think, queue in the TMA unit behind the
// weights' loads; not profiled).
constexpr int64_t kGroupedTmaStoreMinRows = 512;
bool GroupedGemmStoresThroughTma(int64_t rows_per_group);

// What kiln::tune times for a shape: the heuristic's choice first, then every tile and split
// that suits the shape (a split only where the tiles do not fill the SMs, each block with at
// least 4 K steps) at its most stages and group_m 8, in the heuristic's order, then for M > 64
// the 128-row tiles with B multicast (26 at most).
std::vector<gemm::GemmTactic> GemmTuneCandidates(int64_t m, int64_t n, int64_t k, int sms);

// How many clusters of split_k blocks (one block per SM: every gemm block has over half the
// SM's shared memory) run at once on a GPU of `sms` SMs, as the heuristic assumes: sms / 2 for
// pairs; for 4 and 8, 15/16 of sms / split_k (a cluster stays inside one GPC, and GPCs do not
// divide evenly: the H200's occupancy calculator says 66, 30 and 15 for 132 SMs). The launch
// asks the driver (cuOccupancyMaxActiveClusters) for the real figure.
int GemmClusterSlots(int sms, int split_k);

}  // namespace kiln::client
