#include "client/ops/gemm/fp8_gemm_plan.h"

#include <limits>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/row_view.h"

namespace kiln::client {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }
std::string RankText(const TensorView& t) {
  return "rank " + Str(t.ndim) + (t.ndim >= 1 && t.ndim <= kMaxTensorDims ? " " + ShapeText(t) : "");
}

// Whether `t` has a's leading dims and `last` as its last dim.
bool RowsLikeA(const TensorView& t, const TensorView& a, int64_t last) {
  if (t.ndim != a.ndim || t.ndim < 1) return false;
  for (int i = 0; i + 1 < a.ndim; ++i)
    if (t.shape[i] != a.shape[i]) return false;
  return t.shape[t.ndim - 1] == last;
}

}  // namespace

Status CheckFp8GemmDTypes(const TensorView& d_t, const TensorView& a_t, const TensorView& b_t) {
  if (a_t.dtype != DType::kFloat8E4M3)
    return InvalidArgument(std::string("a: dtype ") + DTypeName(a_t.dtype) +
                           " is not supported; expected fp8_e4m3 (the ops without fp8 in their name take bf16 and "
                           "fp16)");
  if (b_t.dtype != DType::kFloat8E4M3)
    return InvalidArgument(std::string("b: expected dtype fp8_e4m3 (a's), found ") + DTypeName(b_t.dtype));
  if (d_t.dtype != DType::kBFloat16 && d_t.dtype != DType::kFloat32)
    return InvalidArgument(std::string("d: dtype ") + DTypeName(d_t.dtype) +
                           " is not supported; expected bf16 or fp32");
  return OkStatus();
}

StatusOr<RowView> ViewAScales(const TensorView& sa_t, const TensorView& a_t, int64_t k) {
  const int64_t kb = gemm::Fp8ScaleBlocks(k);
  KILN_ASSIGN_OR_RETURN(const RowView sa, ViewAsRows(sa_t, "a_scales"));
  if (sa_t.dtype != DType::kFloat32)
    return InvalidArgument(std::string("a_scales: expected dtype fp32, found ") + DTypeName(sa_t.dtype));
  if (!RowsLikeA(sa_t, a_t, kb))
    return InvalidArgument("a_scales: expected a's leading dims and ceil(K / 128) = " + Str(kb) + " last, found " +
                           ShapeText(sa_t) + " for a " + ShapeText(a_t));
  KILN_RETURN_IF_ERROR(CheckSameDevice(sa_t, "a_scales", a_t.device, "a"));
  return sa;
}

StatusOr<int64_t> KernelScaleStride(const RowView& scales, int64_t k_blocks, const char* name) {
  const int64_t row_stride = scales.rows > 1 ? scales.row_stride : k_blocks;
  const int64_t span = (scales.rows - 1) * row_stride + scales.hidden;
  if (scales.rows > 0 && span > std::numeric_limits<int32_t>::max())
    return InvalidArgument(std::string(name) + ": its " + Str(scales.rows) + " rows " + Str(row_stride) +
                           " elements apart span " + Str(span) +
                           " elements; the kernels index scales with 32-bit offsets (below 2^31)");
  return row_stride;
}

namespace {

StatusOr<Fp8GemmPlan> Plan(const TensorView& d_t, const TensorView& a_t, const TensorView& b_t, const TensorView& sa_t,
                           const TensorView& sb_t) {
  KILN_ASSIGN_OR_RETURN(const RowView a, ViewAsRows(a_t, "a"));
  if (b_t.ndim != 2) return InvalidArgument("b: expected a 2-D tensor [N, K], found " + RankText(b_t));
  KILN_ASSIGN_OR_RETURN(const RowView b, ViewAsRows(b_t, "b"));
  KILN_ASSIGN_OR_RETURN(const RowView d, ViewAsRows(d_t, "d"));

  KILN_RETURN_IF_ERROR(CheckFp8GemmDTypes(d_t, a_t, b_t));

  KILN_RETURN_IF_ERROR(CheckDenseGemmShapes(d_t, a_t, b_t, a, b, d));
  const int64_t m = a.rows, k = a.hidden, n = b.rows;

  // The scales: fp32, one per (row of a, 128 of K) and per (128 rows of b, 128 of K).
  const int64_t kb = gemm::Fp8ScaleBlocks(k), nb = gemm::Fp8ScaleBlocks(n);
  KILN_ASSIGN_OR_RETURN(const RowView sa, ViewAScales(sa_t, a_t, k));
  if (sb_t.ndim != 2)
    return InvalidArgument("b_scales: expected a 2-D tensor [ceil(N / 128), ceil(K / 128)] = [" + Str(nb) + ", " +
                           Str(kb) + "], found " + RankText(sb_t));
  KILN_ASSIGN_OR_RETURN(const RowView sb, ViewAsRows(sb_t, "b_scales"));
  if (sb_t.dtype != DType::kFloat32)
    return InvalidArgument(std::string("b_scales: expected dtype fp32, found ") + DTypeName(sb_t.dtype));
  if (sb.rows != nb || sb.hidden != kb)
    return InvalidArgument("b_scales: expected shape [ceil(N / 128), ceil(K / 128)] = [" + Str(nb) + ", " + Str(kb) +
                           "], found " + ShapeText(sb_t));
  KILN_RETURN_IF_ERROR(CheckSameDevice(sb_t, "b_scales", a_t.device, "a"));

  KILN_RETURN_IF_ERROR(CheckGemmLayout(d, a, b, n));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(d, sa, false));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(d, sb, false));

  Fp8GemmPlan plan;
  plan.out_dtype = d_t.dtype;
  plan.device = a_t.device.index;
  plan.m = m;
  plan.n = n;
  plan.k = k;
  plan.a = a.data;
  plan.b = b.data;
  plan.d = d.data;
  plan.a_scales = reinterpret_cast<const float*>(sa.data);
  plan.b_scales = reinterpret_cast<const float*>(sb.data);
  plan.a_row_stride = a.rows > 1 ? a.row_stride : k;
  plan.b_row_stride = b.rows > 1 ? b.row_stride : k;
  plan.d_row_stride = d.row_stride;
  KILN_ASSIGN_OR_RETURN(plan.a_scale_stride, KernelScaleStride(sa, kb, "a_scales"));
  KILN_ASSIGN_OR_RETURN(plan.b_scale_stride, KernelScaleStride(sb, kb, "b_scales"));
  return plan;
}

// fp8 tiles' throughput relative to 128 x 256 where every tile is busy (M = N = K = 4096 on the
// H200, kiln-bench's fp8_gemm kiln_t<M>x<N> backends, 2026-12-02: 134, 163, 213, 222, 259 and
// 363 us): a smaller tile reads more bytes from L2 per FLOP.
struct Fp8TileThroughput {
  int tile_m;
  int tile_n;
  double relative;
};
constexpr Fp8TileThroughput kFp8TileThroughput[] = {{128, 256, 1.00}, {128, 128, 0.82}, {64, 256, 0.63},
                                                    {128, 64, 0.60},  {64, 128, 0.52},  {64, 64, 0.37}};

}  // namespace

StatusOr<Fp8GemmPlan> PlanFp8Gemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                  const TensorView& a_scales, const TensorView& b_scales, const char* api) {
  auto plan = Plan(d, a, b, a_scales, b_scales);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

gemm::GemmTactic ChooseFp8GemmTactic(int64_t m, int64_t n, int64_t k, int sms) {
  if (sms < 1) sms = 1;
  if (m < 1) m = 1;
  // Memory-bound (decode): the weight must stream at HBM speed; gemm's rule on fp8's K steps.
  if (m <= 64) return ChooseMemoryBoundTactic(m, n, (k + gemm::kFp8ScaleBlock - 1) / gemm::kFp8ScaleBlock, sms);
  double best = std::numeric_limits<double>::infinity();
  gemm::GemmTactic chosen{64, 64, gemm::GemmMaxStages(64, 64), 8, 1};
  for (const Fp8TileThroughput& t : kFp8TileThroughput) {
    if (m <= 64 && t.tile_m != 64) continue;  // one consumer: no idle half
    const long long tiles = gemm::GemmTiles(m, n, t.tile_m, t.tile_n);
    const long long waves = (tiles + sms - 1) / sms;
    const double time = static_cast<double>(waves) * t.tile_m * t.tile_n / t.relative;
    if (time < best) {
      best = time;
      chosen = {t.tile_m, t.tile_n, gemm::GemmMaxStages(t.tile_m, t.tile_n), 8, 1};
    }
  }
  return chosen;
}

}  // namespace kiln::client
