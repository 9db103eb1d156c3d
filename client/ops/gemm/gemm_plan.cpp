#include "client/ops/gemm/gemm_plan.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/row_view.h"

namespace kiln::client {

Status CheckTmaOperand(const RowView& v) {
  if (v.begin() % 16 != 0)
    return InvalidArgument(std::string(v.name) + ": data pointer " + PointerText(v.data) +
                           " is not 16-byte aligned (TMA reads it)");
  const int64_t align = 16 / static_cast<int64_t>(v.element_size);  // elements in 16 bytes
  if (v.rows > 1 && v.row_stride % align != 0)
    return InvalidArgument(std::string(v.name) + ": row stride " + std::to_string(v.row_stride) +
                           " is not a multiple of " + std::to_string(align) + " elements (16 bytes, for TMA)");
  return OkStatus();
}

Status CheckPairOperand(const RowView& v) {
  if (v.begin() % (2 * v.element_size) != 0)
    return InvalidArgument(std::string(v.name) + ": data pointer " + PointerText(v.data) + " is not aligned to " +
                           std::to_string(2 * v.element_size) + " bytes (two elements)");
  if (v.rows > 1 && v.row_stride % 2 != 0)
    return InvalidArgument(std::string(v.name) + ": row stride " + std::to_string(v.row_stride) +
                           " is odd; it must be even");
  return OkStatus();
}

Status CheckGemmDTypes(const TensorView& d, const TensorView& a, const TensorView& b) {
  if (a.dtype != DType::kBFloat16 && a.dtype != DType::kFloat16)
    return InvalidArgument(std::string("a: dtype ") + DTypeName(a.dtype) + " is not supported; expected bf16 or fp16");
  if (b.dtype != a.dtype)
    return InvalidArgument(std::string("b: expected dtype ") + DTypeName(a.dtype) + " (a's), found " +
                           DTypeName(b.dtype));
  if (d.dtype != DType::kBFloat16 && d.dtype != DType::kFloat16 && d.dtype != DType::kFloat32)
    return InvalidArgument(std::string("d: dtype ") + DTypeName(d.dtype) +
                           " is not supported; expected bf16, fp16 or fp32");
  return OkStatus();
}

Status CheckGemmLayout(const RowView& d, const RowView& a, const RowView& b, int64_t n) {
  KILN_RETURN_IF_ERROR(CheckTmaOperand(a));
  KILN_RETURN_IF_ERROR(CheckTmaOperand(b));
  KILN_RETURN_IF_ERROR(CheckPairOperand(d));
  if (d.rows > 1 && d.row_stride < n)
    return InvalidArgument("d: its rows overlap (row stride " + std::to_string(d.row_stride) + " < N " +
                           std::to_string(n) + "); the output needs a row stride of at least N");
  KILN_RETURN_IF_ERROR(CheckNoOverlap(d, a, false));
  return CheckNoOverlap(d, b, false);
}

namespace {

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

Status CheckDenseGemmShapes(const TensorView& d_t, const TensorView& a_t, const TensorView& b_t, const RowView& a,
                            const RowView& b, const RowView& d) {
  const int64_t m = a.rows, k = a.hidden, n = b.rows;
  if (b.hidden != k)
    return InvalidArgument("b: expected shape [N, " + Str(k) + "] (K = a's last dim), found " + ShapeText(b_t));
  bool leading_match = d_t.ndim == a_t.ndim;
  for (int i = 0; leading_match && i + 1 < a_t.ndim; ++i) leading_match = d_t.shape[i] == a_t.shape[i];
  if (!leading_match || d.hidden != n)
    return InvalidArgument("d: expected a's leading dims and N = " + Str(n) + " (b's rows) last, found " +
                           ShapeText(d_t) + " for a " + ShapeText(a_t));
  const int64_t k_align = 16 / static_cast<int64_t>(DTypeSize(a_t.dtype));  // elements in 16 bytes
  if (k % k_align != 0 || k == 0)
    return InvalidArgument("a: K (the last dim) must be a positive multiple of " + Str(k_align) +
                           " (16-byte rows for TMA), found " + Str(k) + " in shape " + ShapeText(a_t));
  if (n % gemm::kAlignElements != 0 || n == 0)
    return InvalidArgument("b: N (the rows) must be a positive multiple of 8, found " + Str(n) + " in shape " +
                           ShapeText(b_t));
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return InvalidArgument("a: M, N and K must be below 2^31 (TMA coordinates), found M=" + Str(m) + ", N=" + Str(n) +
                           ", K=" + Str(k));
  KILN_RETURN_IF_ERROR(CheckSameDevice(b_t, "b", a_t.device, "a"));
  return CheckSameDevice(d_t, "d", a_t.device, "a");
}

namespace {

StatusOr<GemmPlan> Plan(const TensorView& d_t, const TensorView& a_t, const TensorView& b_t, const TensorView* bias_t,
                        const TensorView* c_t, double beta) {
  KILN_ASSIGN_OR_RETURN(const RowView a, ViewAsRows(a_t, "a"));
  if (b_t.ndim != 2)
    return InvalidArgument("b: expected a 2-D tensor [N, K], found rank " + Str(b_t.ndim) +
                           (b_t.ndim >= 1 && b_t.ndim <= kMaxTensorDims ? " " + ShapeText(b_t) : ""));
  KILN_ASSIGN_OR_RETURN(const RowView b, ViewAsRows(b_t, "b"));
  KILN_ASSIGN_OR_RETURN(const RowView d, ViewAsRows(d_t, "d"));

  KILN_RETURN_IF_ERROR(CheckGemmDTypes(d_t, a_t, b_t));

  KILN_RETURN_IF_ERROR(CheckDenseGemmShapes(d_t, a_t, b_t, a, b, d));
  const int64_t m = a.rows, k = a.hidden, n = b.rows;

  GemmPlan plan;
  if (bias_t != nullptr) {
    if (bias_t->ndim != 1)
      return InvalidArgument("bias: expected a 1-D tensor [N] = [" + Str(n) + "], found rank " + Str(bias_t->ndim) +
                             (bias_t->ndim >= 1 && bias_t->ndim <= kMaxTensorDims ? " " + ShapeText(*bias_t) : ""));
    KILN_ASSIGN_OR_RETURN(const RowView bias, ViewAsRows(*bias_t, "bias"));
    if (bias_t->dtype != a_t.dtype)
      return InvalidArgument(std::string("bias: expected dtype ") + DTypeName(a_t.dtype) + " (a's), found " +
                             DTypeName(bias_t->dtype));
    if (bias.hidden != n)
      return InvalidArgument("bias: expected shape [" + Str(n) + "] (N), found " + ShapeText(*bias_t));
    KILN_RETURN_IF_ERROR(CheckSameDevice(*bias_t, "bias", a_t.device, "a"));
    KILN_RETURN_IF_ERROR(CheckPairOperand(bias));
    KILN_RETURN_IF_ERROR(CheckNoOverlap(d, bias, false));
    plan.bias = bias.data;
  }
  if (!std::isfinite(beta) || !std::isfinite(static_cast<float>(beta)))
    return InvalidArgument("beta: expected a finite float, found " + NumberText(beta));
  if (c_t != nullptr) {
    KILN_ASSIGN_OR_RETURN(const RowView c, ViewAsRows(*c_t, "c"));
    if (c_t->dtype != d_t.dtype)
      return InvalidArgument(std::string("c: expected dtype ") + DTypeName(d_t.dtype) + " (d's), found " +
                             DTypeName(c_t->dtype));
    bool same_shape = c_t->ndim == d_t.ndim;
    for (int i = 0; same_shape && i < d_t.ndim; ++i) same_shape = c_t->shape[i] == d_t.shape[i];
    if (!same_shape) return InvalidArgument("c: expected shape " + ShapeText(d_t) + " (d's), found " + ShapeText(*c_t));
    KILN_RETURN_IF_ERROR(CheckSameDevice(*c_t, "c", a_t.device, "a"));
    KILN_RETURN_IF_ERROR(CheckPairOperand(c));
    KILN_RETURN_IF_ERROR(CheckNoOverlap(d, c, /*same_is_ok=*/true));
    if (beta != 0) {
      plan.c = c.data;
      plan.c_row_stride = c.row_stride;
    }
  }

  KILN_RETURN_IF_ERROR(CheckGemmLayout(d, a, b, n));

  plan.dtype = a_t.dtype;
  plan.out_dtype = d_t.dtype;
  plan.device = a_t.device.index;
  plan.m = m;
  plan.n = n;
  plan.k = k;
  plan.a = a.data;
  plan.b = b.data;
  plan.d = d.data;
  plan.a_row_stride = a.rows > 1 ? a.row_stride : k;
  plan.b_row_stride = b.rows > 1 ? b.row_stride : k;
  plan.d_row_stride = d.row_stride;
  plan.beta = static_cast<float>(beta);
  return plan;
}

}  // namespace

StatusOr<GemmPlan> PlanGemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView* bias,
                            const TensorView* c, double beta, const char* api) {
  auto plan = Plan(d, a, b, bias, c, beta);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

namespace {

// The throughput of each tile relative to 128x256 where every tile is busy (bf16, M = N = K =
// 4096 on the H200, kiln-bench's kiln_t<M>x<N> backends, 2026-12-02: 195, 207, 219, 264, 323
// and 425 us): a smaller tile reads more bytes per FLOP and has less wgmma work per barrier.
struct TileThroughput {
  int tile_m;
  int tile_n;
  double relative;
};
constexpr TileThroughput kTileThroughput[] = {{128, 256, 1.00}, {128, 128, 0.94}, {64, 256, 0.89},
                                              {64, 128, 0.74},  {128, 64, 0.60},  {64, 64, 0.46}};
// The 192-wide tiles (added 2026-12-03) where no table ranks them (below M 1024, and at a K
// below kWideRegisterTileMinK): after every ranked tile (by the throughput of the next narrower
// one, 128 wide), so the heuristic does not pick them there; the tuner times them and a
// blocklist walk reaches them.
constexpr TileThroughput kUnrankedWideTiles[] = {{128, 192, 0.94}, {64, 192, 0.74}};
// From M 1024 on (compute-bound: many tiles, no split), re-measured on an H100 on 2026-12-06
// (bench/results/2026-12-06-h100-gemm-tiles.md: every large tile at 11 Llama-3.1-8B shapes, M 1024
// to 16384). Since the TMA-store epilogue (2026-12-03) the tiles that still store from registers
// (128 x 128 at its 7 stages, the 192-wide ones: no room for a staging buffer) fall behind those
// that overlap their stores with the next tile: 128 x 128 0.75 where the table above has 0.94,
// 128 x 192 0.86, 64 x 192 0.62; 64 x 256 and the narrow tiles as above. Below M 1024 the table
// above stays: the split-K choices it ranks there measured 1.03-1.31x faster than this table's
// (128 x 128 split against 64 x 256 split at M 65-512, the same run), and the grouped ops were
// not re-measured.
constexpr int64_t kLargeMRows = 1024;
constexpr TileThroughput kLargeMTileThroughput[] = {{128, 256, 1.00}, {64, 256, 0.89}, {128, 192, 0.86},
                                                    {128, 128, 0.75}, {64, 128, 0.74}, {64, 192, 0.62},
                                                    {128, 64, 0.60},  {64, 64, 0.46}};
// The 192-wide tiles' register stores are a fixed cost per tile that only a long K hides: at
// 1536 x 2048 x 768 the 128 x 192 tile took 1.19x the time of 128 x 256, at K 2048 0.99-1.01x,
// at K 4096 and more 0.85-0.93x (the same run). Below this K they stay unranked (tuning only).
constexpr int64_t kWideRegisterTileMinK = 2048;

// Each block of a split-K cluster has at least this many K steps (a shorter pipeline does not
// reach its steady state), and the cluster's reduction costs about this many K steps.
constexpr int kMinStepsPerSplit = 4;
constexpr int kReductionSteps = 2;
// Compute-bound blocks need this many stages to hide the loads behind the MMAs (every tile
// has them without a split; a split's partial tile leaves 128 x 256 only 2).
constexpr int kHidingStages = 4;
// At most this many rows of D, the wide 64 x 256 tile streams the weight best; above, up to 64,
// the 64 x 64 one (A's rows, read again by every block, then cost as much as B's).
constexpr int64_t kWideTileMaxM = 16;
// From this M on, the 128 x 256 tile runs as multicast pairs (ChooseGemmTactic).
constexpr int64_t kMulticastMinRows = 4096;

struct ScoredTile {
  double time;  // predicted, in arbitrary units: lower is better
  gemm::GemmTactic tile;
};

bool SplitSuits(long long k_steps, int split) {
  return split == 1 || k_steps >= static_cast<long long>(split) * kMinStepsPerSplit;
}

// The tile and split the memory-bound rule picks for M <= 64, measured on the H200
// (bench/results/2026-12-02-gemm-split-k-h200.md): the tile by M (kWideTileMaxM); when its
// tiles fit in one wave, K split over the largest cluster whose clusters still all run at once
// (more blocks stream the weight); with more tiles than SMs, no split and the width that fills
// the waves best, a wider one winning a near-tie (within 0.02).
gemm::GemmTactic MemoryBoundChoice(int64_t m, int64_t n, long long k_steps, int sms) {
  const int preferred = m <= kWideTileMaxM ? 256 : 64;
  const long long tiles = gemm::GemmTiles(m, n, 64, preferred);
  if (tiles <= sms) {
    int split = 1;
    for (int s : gemm::kSplitKChoices)
      if (SplitSuits(k_steps, s) && tiles <= GemmClusterSlots(sms, s)) split = s;
    return {64, preferred, gemm::GemmMaxStages(64, preferred, split), 8, split};
  }
  double best_fill = -1;
  int chosen = 256;
  for (int width : {256, 128, 64}) {
    const long long count = gemm::GemmTiles(m, n, 64, width);
    const long long waves = (count + sms - 1) / sms;
    const double fill = static_cast<double>(count) / static_cast<double>(waves * sms);
    if (fill > best_fill + 0.02) {
      best_fill = fill;
      chosen = width;
    }
  }
  return {64, chosen, gemm::GemmMaxStages(64, chosen), 8, 1};
}

// Every (tile, split_k) of the space that suits the shape, least predicted time first (ties
// keep the order of kTileThroughput / the widths, then the smaller split). For M <= 64 the
// memory-bound rule's choice comes first, then the 64-row tiles by the model, then the 128-row
// ones (two consumers, one of them idle).
std::vector<ScoredTile> RankTiles(int64_t m, int64_t n, int64_t k, int sms) {
  if (sms < 1) sms = 1;
  const long long k_steps = (k + gemm::kTileK - 1) / gemm::kTileK;
  // Predicted time of a tile and split: waves of clusters x the K steps of one block (plus the
  // reduction) x the tile's cost per step (`per_step`), more with fewer than kHidingStages.
  auto add = [&](std::vector<ScoredTile>& out, int tile_m, int tile_n, double per_step) {
    for (int split : gemm::kSplitKChoices) {
      const int stages = gemm::GemmMaxStages(tile_m, tile_n, split);
      const long long tiles = gemm::GemmTiles(m, n, tile_m, tile_n);
      if (stages == 0 || !SplitSuits(k_steps, split)) continue;
      const long long clusters = GemmClusterSlots(sms, split);
      const long long waves = (tiles + clusters - 1) / clusters;
      const long long steps = (k_steps + split - 1) / split + (split > 1 ? kReductionSteps : 0);
      const double cost = per_step / std::min(1.0, static_cast<double>(stages) / kHidingStages);
      // A split is for shapes whose tiles do not fill the SMs; with more, it only adds waves:
      // ranked last (a blocklist may still reach it).
      const double time = split > 1 && tiles >= sms ? std::numeric_limits<double>::infinity()
                                                    : static_cast<double>(waves) * static_cast<double>(steps) * cost;
      out.push_back({time, {tile_m, tile_n, stages, 8, split}});
    }
  };
  const auto by_time = [](const ScoredTile& a, const ScoredTile& b) { return a.time < b.time; };
  std::vector<ScoredTile> scored;
  if (m <= 64) {
    const gemm::GemmTactic chosen = MemoryBoundChoice(m, n, k_steps, sms);
    for (int tile_n : {256, 128, 64}) add(scored, 64, tile_n, tile_n);
    std::stable_sort(scored.begin(), scored.end(), by_time);
    std::stable_partition(scored.begin(), scored.end(), [&](const ScoredTile& s) {
      return s.tile.tile_n == chosen.tile_n && s.tile.split_k == chosen.split_k;
    });
    std::vector<ScoredTile> wide;
    for (int tile_n : {256, 128, 64}) add(wide, 128, tile_n, 2.0 * tile_n);
    std::stable_sort(wide.begin(), wide.end(), by_time);
    scored.insert(scored.end(), wide.begin(), wide.end());
  } else {
    // Compute-bound: a tile's work over its throughput, from the table of the shape's M.
    const std::span<const TileThroughput> table = m < kLargeMRows ? std::span<const TileThroughput>(kTileThroughput)
                                                                  : kLargeMTileThroughput;
    for (const TileThroughput& t : table)
      if (t.tile_n != 192 || k >= kWideRegisterTileMinK)
        add(scored, t.tile_m, t.tile_n, t.tile_m * t.tile_n / t.relative);
    std::stable_sort(scored.begin(), scored.end(), by_time);
  }
  // The 192-wide tiles where the shape's table does not rank them: after every ranked tile.
  std::vector<ScoredTile> unranked;
  const bool wide_ranked = m >= kLargeMRows && k >= kWideRegisterTileMinK;
  for (const TileThroughput& t : kUnrankedWideTiles)
    if (!wide_ranked) add(unranked, t.tile_m, t.tile_n, t.tile_m * t.tile_n / t.relative);
  std::stable_sort(unranked.begin(), unranked.end(), by_time);
  scored.insert(scored.end(), unranked.begin(), unranked.end());
  return scored;
}

// B multicast at large M: the 128 x 256 tile in pairs sharing B ran 0.975-0.992x the time of
// the same tile alone at M 4096 and 16384 on 7 of the Llama-3.1-8B shapes (one within noise,
// 1.017x) in graphs of back-to-back calls (bench/results/2026-12-03-fused-moe-h200.md, "gemm:
// multicast as the default"); below M 4096 it was not measured better (-1..+3 %).
gemm::GemmTactic AsMulticastPair(int64_t m, gemm::GemmTactic tile) {
  if (m < kMulticastMinRows || tile.tile_m != 128 || tile.tile_n != 256 || tile.split_k != 1) return tile;
  const int stages = gemm::GemmMaxStages(128, 256, 1, false, 2);
  return stages == 0 ? tile : gemm::GemmTactic{128, 256, stages, tile.group_m, 1, 2};
}

}  // namespace

std::vector<gemm::GemmTactic> RankGemmTactics(int64_t m, int64_t n, int64_t k, int sms) {
  // Per tile and split: the most stages first, then fewer; group_m 8, then the other raster
  // groups.
  std::vector<gemm::GemmTactic> ranked;
  // The heuristic's multicast pair (M >= kMulticastMinRows) first, then the space without
  // multicast, its tile alone next.
  const std::vector<ScoredTile> tiles = RankTiles(m, n, k, sms);
  const gemm::GemmTactic choice = AsMulticastPair(m, tiles.front().tile);
  if (choice.multicast > 1) ranked.push_back(choice);
  for (const ScoredTile& s : tiles) {
    const gemm::GemmTactic& t = s.tile;
    for (int stages = t.stages; stages >= gemm::kMinStages; --stages) {
      ranked.push_back({t.tile_m, t.tile_n, stages, 8, t.split_k});
      for (int group_m = 1; group_m <= gemm::kMaxGroupM; ++group_m)
        if (group_m != 8) ranked.push_back({t.tile_m, t.tile_n, stages, group_m, t.split_k});
    }
  }
  return ranked;
}

std::vector<gemm::GemmTactic> GemmTuneCandidates(int64_t m, int64_t n, int64_t k, int sms) {
  std::vector<gemm::GemmTactic> out = {ChooseGemmTactic(m, n, k, sms)};
  for (const ScoredTile& s : RankTiles(m, n, k, sms)) {
    if (std::isinf(s.time)) continue;  // a split of a shape whose tiles fill the SMs
    if (std::none_of(out.begin(), out.end(),
                     [&](const gemm::GemmTactic& o) { return gemm::SameGemmTactic(o, s.tile); }))
      out.push_back(s.tile);
  }
  // B multicast of the 128-row tiles: within -1..+3 % of the same tile without it on the H200
  // (bench/results/2026-12-03-gemm-multicast-h200.md): a candidate to time (the heuristic's
  // choice from M kMulticastMinRows on).
  if (m > 64) {
    for (int tile_n : {256, 128}) {
      const gemm::GemmTactic multicast{128, tile_n, gemm::GemmMaxStages(128, tile_n, 1, false, 2), 8, 1, 2};
      if (std::none_of(out.begin(), out.end(),
                       [&](const gemm::GemmTactic& o) { return gemm::SameGemmTactic(o, multicast); }))
        out.push_back(multicast);
    }
  }
  return out;
}

gemm::GemmTactic ChooseMemoryBoundTactic(int64_t m, int64_t n, long long k_steps, int sms) {
  return MemoryBoundChoice(m < 1 ? 1 : m, n, k_steps, sms < 1 ? 1 : sms);
}

gemm::GemmTactic ChooseGemmTactic(int64_t m, int64_t n, int64_t k, int sms) {
  if (m <= 64) return MemoryBoundChoice(m, n, (k + gemm::kTileK - 1) / gemm::kTileK, sms < 1 ? 1 : sms);
  return AsMulticastPair(m, RankTiles(m, n, k, sms).front().tile);
}

gemm::GemmTactic ChooseGroupedGemmTactic(int64_t rows_per_group, int groups, int64_t n, int64_t k, int sms,
                                         bool masked) {
  (void)k;  // every tile streams the same K
  if (sms < 1) sms = 1;
  if (groups < 1) groups = 1;
  if (rows_per_group < 1) rows_per_group = 1;
  const gemm::GemmTactic narrow{64, 128, gemm::GemmMaxStages(64, 128, 1, true), 8, 1};
  if (masked && rows_per_group <= 64) return narrow;  // weight streaming (gemm_plan.h)
  double best = std::numeric_limits<double>::infinity();
  gemm::GemmTactic chosen = narrow;
  for (const TileThroughput& t : kTileThroughput) {
    if (rows_per_group <= 64 && t.tile_m != 64) continue;  // one consumer: no idle half
    const long long tiles = static_cast<long long>(groups) * ((rows_per_group + t.tile_m - 1) / t.tile_m) *
                            ((n + t.tile_n - 1) / t.tile_n);
    const long long waves = (tiles + sms - 1) / sms;
    const double time = static_cast<double>(waves) * t.tile_m * t.tile_n / t.relative;
    if (time < best) {
      best = time;
      chosen = {t.tile_m, t.tile_n, gemm::GemmMaxStages(t.tile_m, t.tile_n, 1, true), 8, 1};
    }
  }
  return chosen;
}

bool GroupedGemmStoresThroughTma(int64_t rows_per_group) { return rows_per_group >= kGroupedTmaStoreMinRows; }

int GemmClusterSlots(int sms, int split_k) {
  if (sms < 1) sms = 1;
  if (split_k <= 2) return std::max(1, sms / split_k);
  return std::max(1, sms * 15 / (16 * split_k));
}

}  // namespace kiln::client
