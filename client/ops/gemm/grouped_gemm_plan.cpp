#include "client/ops/gemm/grouped_gemm_plan.h"

#include <climits>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/gemm/fp8_gemm_plan.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/row_view.h"

namespace kiln::client {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

std::string RankText(const TensorView& t) {
  return "rank " + Str(t.ndim) + (t.ndim >= 1 && t.ndim <= kMaxTensorDims ? " " + ShapeText(t) : "");
}

// The groups' rows: a contiguous int32 vector of `size` on a's device.
StatusOr<const int32_t*> GroupRowsOf(const TensorView& t, const char* name, int64_t size, const char* meaning,
                                     const TensorView& a) {
  KILN_RETURN_IF_ERROR(CheckCudaTensor(t, name));
  if (t.ndim != 1 || t.shape[0] != size)
    return InvalidArgument(std::string(name) + ": expected shape [" + Str(size) + "] (" + meaning + "), found " +
                           RankText(t));
  if (t.dtype != DType::kInt32)
    return InvalidArgument(std::string(name) + ": expected dtype int32, found " + DTypeName(t.dtype));
  if (size > 1 && t.strides[0] != 1)
    return InvalidArgument(std::string(name) + ": must be contiguous (stride 1), found stride " + Str(t.strides[0]));
  if (t.data == nullptr) return InvalidArgument(std::string(name) + ": data pointer is NULL");
  if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0)
    return InvalidArgument(std::string(name) + ": data pointer " + PointerText(t.data) + " is not 4-byte aligned");
  KILN_RETURN_IF_ERROR(CheckSameDevice(t, name, a.device, "a"));
  return static_cast<const int32_t*>(t.data);
}

// The scales of the fp8 forms (null: the bf16/fp16 ops); d's with silu_and_mul into e4m3.
struct Fp8Scales {
  const TensorView* a = nullptr;
  const TensorView* b = nullptr;
  const TensorView* d = nullptr;
};

// The fp8 silu_and_mul epilogue's types: e4m3 a, b and d (its codes).
Status CheckFp8CodesDTypes(const TensorView& d_t, const TensorView& a_t, const TensorView& b_t) {
  for (const auto& [t, name] : {std::pair{&a_t, "a"}, std::pair{&b_t, "b"}})
    if (t->dtype != DType::kFloat8E4M3)
      return InvalidArgument(std::string(name) + ": expected dtype fp8_e4m3, found " + DTypeName(t->dtype));
  if (d_t.dtype != DType::kFloat8E4M3)
    return InvalidArgument(std::string("d: expected dtype fp8_e4m3 (the codes of silu(gate) * up), found ") +
                           DTypeName(d_t.dtype));
  return OkStatus();
}

// d's scales of the fp8 silu_and_mul epilogue: fp32 [rows, d_columns / 128] on a's device, apart
// from d, a and b (the kernel writes them while it reads a and b and writes d).
Status CheckCodesScales(const TensorView& sd_t, const TensorView& d_t, const RowView& d, const RowView& a,
                        const RowView& b, const RowView& a_scales, int64_t d_columns, GroupedGemmPlan* plan) {
  if (d_columns % gemm::kFp8ScaleBlock != 0)
    return InvalidArgument("b: N / 2 (the gate rows of a group) must be a multiple of " + Str(gemm::kFp8ScaleBlock) +
                           " (a tile's 128 columns of d are one scale group, and the up rows start a scale block of "
                           "b), found " +
                           Str(d_columns));
  const int64_t blocks = d_columns / gemm::kFp8ScaleBlock;
  if (sd_t.ndim != 2 || sd_t.shape[0] != d_t.shape[0] || sd_t.shape[1] != blocks)
    return InvalidArgument("d_scales: expected shape [" + Str(d_t.shape[0]) + ", " + Str(blocks) +
                           "] (d's rows, N / 2 / 128), found " + RankText(sd_t));
  if (sd_t.dtype != DType::kFloat32)
    return InvalidArgument(std::string("d_scales: expected dtype fp32, found ") + DTypeName(sd_t.dtype));
  KILN_ASSIGN_OR_RETURN(const RowView sd, ViewAsRows(sd_t, "d_scales"));
  KILN_RETURN_IF_ERROR(CheckSameDevice(sd_t, "d_scales", d_t.device, "d"));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(sd, d, false));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(sd, a, false));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(sd, b, false));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(sd, a_scales, false));
  plan->d_scales = reinterpret_cast<float*>(sd.data);
  plan->d_scale_stride = sd.rows > 1 ? sd.row_stride : blocks;
  return OkStatus();
}

// What both layouts check: dtypes, b [E, N, K] as E * N rows, N and K, d's rows, alignment and
// overlaps; fp8, the scales. `a` and `d` are already viewed as rows (rows of all groups). With
// silu_and_mul, b's N rows per group are [gate; up] and d has N / 2 columns.
Status CheckCommon(const TensorView& d_t, const TensorView& a_t, const TensorView& b_t, const RowView& a,
                   const RowView& d, const Fp8Scales* fp8, bool silu_and_mul, GroupedGemmPlan* plan) {
  const bool codes = fp8 != nullptr && fp8->d != nullptr;
  KILN_RETURN_IF_ERROR(codes            ? CheckFp8CodesDTypes(d_t, a_t, b_t)
                       : fp8 != nullptr ? CheckFp8GemmDTypes(d_t, a_t, b_t)
                                        : CheckGemmDTypes(d_t, a_t, b_t));
  if (b_t.ndim != 3) return InvalidArgument("b: expected a 3-D tensor [E, N, K], found " + RankText(b_t));
  KILN_ASSIGN_OR_RETURN(const RowView b, ViewAsRows(b_t, "b"));
  const int64_t groups = b_t.shape[0], n = b_t.shape[1], k = a.hidden;
  if (groups < 1 || groups > gemm::kMaxGroups)
    return InvalidArgument("b: E (the groups) must be 1.." + Str(gemm::kMaxGroups) + ", found " + Str(groups) +
                           " in shape " + ShapeText(b_t));
  if (b.hidden != k)
    return InvalidArgument("b: expected shape [E, N, " + Str(k) + "] (K = a's last dim), found " + ShapeText(b_t));
  const int64_t k_align = fp8 != nullptr ? 16 : gemm::kAlignElements;  // 16-byte rows
  if (k % k_align != 0 || k == 0)
    return InvalidArgument("a: K (the last dim) must be a positive multiple of " + Str(k_align) +
                           " (16-byte rows for TMA), found " + Str(k) + " in shape " + ShapeText(a_t));
  if (n % gemm::kAlignElements != 0 || n == 0)
    return InvalidArgument("b: N (dim 1) must be a positive multiple of 8, found " + Str(n) + " in shape " +
                           ShapeText(b_t));
  // silu_and_mul: each half of N is whole 16-byte rows of d too.
  if (silu_and_mul && n % (2 * gemm::kAlignElements) != 0)
    return InvalidArgument("b: N (dim 1, [gate; up]) must be a positive multiple of 16, found " + Str(n) +
                           " in shape " + ShapeText(b_t));
  const int64_t d_columns = silu_and_mul ? n / 2 : n;
  if (d.hidden != d_columns)
    return InvalidArgument("d: expected " + std::string(silu_and_mul ? "N / 2 = " : "N = ") + Str(d_columns) +
                           " (b's dim 1" + (silu_and_mul ? ", halved" : "") + ") last, found " + ShapeText(d_t));
  if (a.rows > INT_MAX || groups * n > INT_MAX || k > INT_MAX)
    return InvalidArgument("a: the rows of a and of b (E * N) and K must be below 2^31 (TMA coordinates), found " +
                           Str(a.rows) + ", " + Str(groups * n) + ", " + Str(k));
  KILN_RETURN_IF_ERROR(CheckSameDevice(b_t, "b", a_t.device, "a"));
  KILN_RETURN_IF_ERROR(CheckSameDevice(d_t, "d", a_t.device, "a"));
  KILN_RETURN_IF_ERROR(CheckGemmLayout(d, a, b, d_columns));
  if (fp8 != nullptr) {
    KILN_ASSIGN_OR_RETURN(const RowView sa, ViewAScales(*fp8->a, a_t, k));
    const int64_t kb = gemm::Fp8ScaleBlocks(k);
    const int64_t nb = gemm::Fp8ScaleBlocks(n);
    const TensorView& sb_t = *fp8->b;
    const std::string want_b = "[E, ceil(N / 128), ceil(K / 128)] = [" + Str(groups) + ", " + Str(nb) + ", " + Str(kb) +
                               "]";
    if (sb_t.ndim != 3)
      return InvalidArgument("b_scales: expected a 3-D tensor " + want_b + ", found " + RankText(sb_t));
    KILN_ASSIGN_OR_RETURN(const RowView sb, ViewAsRows(sb_t, "b_scales"));
    if (sb_t.dtype != DType::kFloat32)
      return InvalidArgument(std::string("b_scales: expected dtype fp32, found ") + DTypeName(sb_t.dtype));
    if (sb_t.shape[0] != groups || sb_t.shape[1] != nb || sb_t.shape[2] != kb)
      return InvalidArgument("b_scales: expected shape " + want_b + ", found " + ShapeText(sb_t));
    KILN_RETURN_IF_ERROR(CheckSameDevice(sb_t, "b_scales", a_t.device, "a"));
    KILN_RETURN_IF_ERROR(CheckNoOverlap(d, sa, false));
    KILN_RETURN_IF_ERROR(CheckNoOverlap(d, sb, false));
    plan->a_scales = reinterpret_cast<const float*>(sa.data);
    plan->b_scales = reinterpret_cast<const float*>(sb.data);
    KILN_ASSIGN_OR_RETURN(plan->a_scale_stride, KernelScaleStride(sa, kb, "a_scales"));
    KILN_ASSIGN_OR_RETURN(plan->b_scale_stride, KernelScaleStride(sb, kb, "b_scales"));
    if (codes) {
      KILN_RETURN_IF_ERROR(CheckCodesScales(*fp8->d, d_t, d, a, b, sa, d_columns, plan));
    }
  }
  plan->dtype = a_t.dtype;
  plan->out_dtype = d_t.dtype;
  plan->device = a_t.device.index;
  plan->groups = static_cast<int>(groups);
  plan->rows = a.rows;
  plan->n = n;
  plan->k = k;
  plan->silu_and_mul = silu_and_mul;
  plan->a = a.data;
  plan->b = b.data;
  plan->d = d.data;
  plan->a_row_stride = a.rows > 1 ? a.row_stride : k;
  plan->b_row_stride = b.rows > 1 ? b.row_stride : k;
  plan->d_row_stride = d.row_stride;
  return OkStatus();
}

// A gathered A's row table: int32 [T] (d's rows) on a's device, apart from d; its divisor. Sets
// the plan's gather fields and its rows (d's: a has its own).
Status CheckGather(const GroupedGemmGather& gather, const TensorView& d_t, const TensorView& a_t,
                   GroupedGemmPlan* plan) {
  if (gather.a_rows == nullptr) return InvalidArgument("a_rows: the gathered A's row table is missing (NULL)");
  const int64_t rows = d_t.shape[0];
  KILN_ASSIGN_OR_RETURN(plan->a_rows,
                        GroupRowsOf(*gather.a_rows, "a_rows", rows,
                                    "d's rows: row r of the groups is row a_rows[r] / divisor of a", a_t));
  if (gather.divisor < 1 || gather.divisor > INT_MAX)
    return InvalidArgument("a_rows: the divisor of its entries must be 1.." + Str(INT_MAX) + ", found " +
                           Str(gather.divisor));
  if (rows > INT_MAX) return InvalidArgument("d: the rows of the groups must be below 2^31, found " + Str(rows));
  // The kernel reads the table while it writes d.
  KILN_RETURN_IF_ERROR(CheckDisjoint(d_t, "d", *gather.a_rows, "a_rows"));
  plan->a_row_divisor = static_cast<int>(gather.divisor);
  plan->a_source_rows = plan->rows;
  plan->rows = rows;
  return OkStatus();
}

StatusOr<GroupedGemmPlan> Contiguous(const TensorView& d_t, const TensorView& a_t, const TensorView& b_t,
                                     const TensorView& m_indptr, const Fp8Scales* fp8, bool silu_and_mul = false,
                                     const GroupedGemmGather* gather = nullptr) {
  if (a_t.ndim != 2)
    return InvalidArgument(
        std::string("a: expected a 2-D tensor ") +
        (gather != nullptr ? "[S, K] (the rows the groups gather)" : "[T, K] (the rows of every group)") + ", found " +
        RankText(a_t));
  if (d_t.ndim != 2)
    return InvalidArgument(std::string("d: expected a 2-D tensor [T, ") + (silu_and_mul ? "N / 2" : "N") + "], found " +
                           RankText(d_t));
  KILN_ASSIGN_OR_RETURN(const RowView a, ViewAsRows(a_t, "a"));
  KILN_ASSIGN_OR_RETURN(const RowView d, ViewAsRows(d_t, "d"));
  if (gather == nullptr && d_t.shape[0] != a_t.shape[0])
    return InvalidArgument("d: expected " + Str(a_t.shape[0]) + " rows (a's T), found " + ShapeText(d_t));
  if (gather != nullptr && a_t.shape[0] == 0 && d_t.shape[0] > 0)
    return InvalidArgument("a: a gathered A needs at least one row where d has rows, found " + ShapeText(a_t));
  GroupedGemmPlan plan;
  KILN_RETURN_IF_ERROR(CheckCommon(d_t, a_t, b_t, a, d, fp8, silu_and_mul, &plan));
  if (gather != nullptr) KILN_RETURN_IF_ERROR(CheckGather(*gather, d_t, a_t, &plan));
  KILN_ASSIGN_OR_RETURN(plan.group_rows, GroupRowsOf(m_indptr, "m_indptr", plan.groups + 1,
                                                     "E + 1: group e is rows m_indptr[e] .. "
                                                     "m_indptr[e + 1] - 1",
                                                     a_t));
  // d must not share bytes with the table the kernel reads while d is written.
  KILN_RETURN_IF_ERROR(CheckDisjoint(d_t, "d", m_indptr, "m_indptr"));
  return plan;
}

StatusOr<GroupedGemmPlan> Masked(const TensorView& d_t, const TensorView& a_t, const TensorView& b_t,
                                 const TensorView& masked_m, const Fp8Scales* fp8) {
  if (a_t.ndim != 3) return InvalidArgument("a: expected a 3-D tensor [E, M_max, K], found " + RankText(a_t));
  if (d_t.ndim != 3) return InvalidArgument("d: expected a 3-D tensor [E, M_max, N], found " + RankText(d_t));
  KILN_ASSIGN_OR_RETURN(const RowView a, ViewAsRows(a_t, "a"));
  KILN_ASSIGN_OR_RETURN(const RowView d, ViewAsRows(d_t, "d"));
  if (b_t.ndim >= 1 && a_t.shape[0] != b_t.shape[0])
    return InvalidArgument("a: expected E = " + Str(b_t.shape[0]) + " (b's dim 0) first, found " + ShapeText(a_t));
  if (d_t.shape[0] != a_t.shape[0] || d_t.shape[1] != a_t.shape[1])
    return InvalidArgument("d: expected [" + Str(a_t.shape[0]) + ", " + Str(a_t.shape[1]) +
                           ", N] (a's E and M_max), found " + ShapeText(d_t));
  GroupedGemmPlan plan;
  KILN_RETURN_IF_ERROR(CheckCommon(d_t, a_t, b_t, a, d, fp8, false, &plan));
  plan.masked = true;
  plan.group_stride = a_t.shape[1];
  KILN_ASSIGN_OR_RETURN(plan.group_rows,
                        GroupRowsOf(masked_m, "masked_m", plan.groups, "E: the valid rows of each group", a_t));
  KILN_RETURN_IF_ERROR(CheckDisjoint(d_t, "d", masked_m, "masked_m"));
  return plan;
}

}  // namespace

StatusOr<GroupedGemmPlan> PlanGroupedGemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                          const TensorView& m_indptr, const char* api,
                                          const GroupedGemmGather* gather) {
  auto plan = Contiguous(d, a, b, m_indptr, nullptr, false, gather);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

StatusOr<GroupedGemmPlan> PlanGroupedGemmSiluAndMul(const TensorView& d, const TensorView& a, const TensorView& b,
                                                    const TensorView& m_indptr, const char* api,
                                                    const GroupedGemmGather* gather) {
  auto plan = Contiguous(d, a, b, m_indptr, nullptr, /*silu_and_mul=*/true, gather);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

StatusOr<GroupedGemmPlan> PlanGroupedGemmMasked(const TensorView& d, const TensorView& a, const TensorView& b,
                                                const TensorView& masked_m, const char* api) {
  auto plan = Masked(d, a, b, masked_m, nullptr);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

StatusOr<GroupedGemmPlan> PlanGroupedFp8Gemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                             const TensorView& a_scales, const TensorView& b_scales,
                                             const TensorView& m_indptr, const char* api,
                                             const GroupedGemmGather* gather) {
  const Fp8Scales scales{&a_scales, &b_scales};
  auto plan = Contiguous(d, a, b, m_indptr, &scales, false, gather);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

StatusOr<GroupedGemmPlan> PlanGroupedFp8GemmSiluAndMul(const TensorView& d, const TensorView& d_scales,
                                                       const TensorView& a, const TensorView& b,
                                                       const TensorView& a_scales, const TensorView& b_scales,
                                                       const TensorView& m_indptr, const char* api,
                                                       const GroupedGemmGather* gather) {
  const Fp8Scales scales{&a_scales, &b_scales, &d_scales};
  auto plan = Contiguous(d, a, b, m_indptr, &scales, /*silu_and_mul=*/true, gather);
  if (!plan.ok()) return plan.status().WithContext(api);
  // The kernel writes the scales while it reads the table.
  if (Status s = CheckDisjoint(d_scales, "d_scales", m_indptr, "m_indptr"); !s.ok()) return s.WithContext(api);
  if (gather != nullptr)
    if (Status s = CheckDisjoint(d_scales, "d_scales", *gather->a_rows, "a_rows"); !s.ok()) return s.WithContext(api);
  plan->api = api;
  return plan;
}

StatusOr<GroupedGemmPlan> PlanGroupedFp8GemmMasked(const TensorView& d, const TensorView& a, const TensorView& b,
                                                   const TensorView& a_scales, const TensorView& b_scales,
                                                   const TensorView& masked_m, const char* api) {
  const Fp8Scales scales{&a_scales, &b_scales};
  auto plan = Masked(d, a, b, masked_m, &scales);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

}  // namespace kiln::client
