// Routines "grouped_fp8_gemm" and "grouped_fp8_gemm_masked" (kiln::ops::grouped_fp8_gemm and
// grouped_fp8_gemm_masked): the grouped products on block-scaled fp8 — e4m3 a and b, fp32
// a_scales (a row per row of a, ceil(k / 128) columns) and b_scales [e, ceil(n / 128), ceil(k /
// 128)], d bf16. The groups' rows as the bf16 routines' (group_counts.h); inputs and scales as
// fp8_gemm's routine (a, b in [-1, 1] rounded to e4m3, scales in [0.25, 4]); the float64
// reference is the product of the dequantized matrices per group.
//
// backends: kiln (the op, heuristic tactic), reference (one thread per element of d, the group
// found by a binary search of m_indptr / from the row, fp32 per scaled block: obviously
// correct), kiln_t<M>x<N> (the tile forced through the client's internal plan, most stages,
// group_m 8: diagnostic).
#include <algorithm>
#include <random>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "bench/op/routines/group_counts.h"
#include "bench/op/routines/hopper_only.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "client/ops/gemm/grouped_gemm_ops.h"
#include "client/ops/gemm/grouped_gemm_plan.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/ops/gemm.h"

namespace kiln::bench {
namespace {

// T is d's type (bf16); e4m3 decoded by hand (bias 7, no infinities, S.1111.111 the NaN).
constexpr const char* kReferenceSource = R"(
__device__ float E4M3(unsigned char x) {
  const int e = (x >> 3) & 15, m = x & 7;
  float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
  if (e == 15 && m == 7) v = __int_as_float(0x7fc00000);
  return (x & 0x80) ? -v : v;
}
// d[row, col] for the group of `row` (masked: row / m_max, valid below masked_m; contiguous: the
// last g with m_indptr[g] <= row < m_indptr[g + 1]); rows of no group untouched.
extern "C" __global__ void kiln_bench_ref_grouped_fp8_gemm(T* d, const unsigned char* a, const unsigned char* b,
                                                           const float* sa, const float* sb, const int* rows_of,
                                                           long long rows, long long n, long long k, int groups,
                                                           long long m_max) {
  const long long row = (long long)blockIdx.y * 16 + threadIdx.y;
  const long long col = (long long)blockIdx.x * 16 + threadIdx.x;
  if (row >= rows || col >= n) return;
  int e;
  if (m_max > 0) {
    e = (int)(row / m_max);
    if (row % m_max >= rows_of[e]) return;
  } else {
    int lo = 0, hi = groups - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (rows_of[mid] <= row) lo = mid; else hi = mid - 1;
    }
    e = lo;
    if (row < rows_of[e] || row >= rows_of[e + 1]) return;
  }
  const long long kb = (k + 127) / 128, nb = (n + 127) / 128;
  float sum = 0.f;
  for (long long blk = 0; blk < kb; ++blk) {
    float part = 0.f;
    for (long long l = blk * 128; l < k && l < blk * 128 + 128; ++l)
      part += E4M3(a[row * k + l]) * E4M3(b[((long long)e * n + col) * k + l]);
    sum += part * sa[row * kb + blk] * sb[((long long)e * nb + col / 128) * kb + blk];
  }
  d[row * n + col] = FromF<T>(sum);
}
)";

int64_t Blocks(int64_t extent) { return (extent + gemm::kFp8ScaleBlock - 1) / gemm::kFp8ScaleBlock; }

// Both routines; kMasked picks the layout. Tensors: d, a, b, a_scales, b_scales, the groups' rows.
template <bool kMasked>
class GroupedFp8GemmRoutine : public Routine {
 public:
  static constexpr size_t kD = 0, kA = 1, kB = 2, kSa = 3, kSb = 4, kRows = 5;

  std::string_view name() const override { return kMasked ? gemm::kGroupedFp8GemmMaskedOp : gemm::kGroupedFp8GemmOp; }
  std::string_view description() const override {
    return kMasked ? "grouped_gemm_masked on block-scaled e4m3 a [e, m_max, k] and b [e, n, k] "
                     "(kiln::ops::grouped_fp8_gemm_masked)"
                   : "grouped_gemm on block-scaled e4m3 a [t, k] and b [e, n, k] (kiln::ops::grouped_fp8_gemm)";
  }
  std::vector<std::string> axes() const override {
    if (kMasked) return {"e", "m_max", "n", "k", "kb", "nb"};
    return {"t", "e", "n", "k", "kb", "nb", "indptr_len"};
  }
  std::vector<DType> dtypes() const override { return {DType::kFloat8E4M3}; }
  std::vector<BackendInfo> backends() const override {
    std::vector<BackendInfo> all = {
        {"kiln", "the op through kiln::ops (the gemm kernel over groups, block-scaled fp8, heuristic tile)"},
        {"reference", "one thread per element of d, fp32 per scaled block (the refcheck baseline)"}};
    for (int tile_m : gemm::kTileMChoices)
      for (int tile_n : gemm::kTileNChoices)
        all.push_back({TileBackend(tile_m, tile_n), "kiln with the tile forced, most stages, group_m 8 (diagnostic)"});
    return all;
  }
  static std::string TileBackend(int tile_m, int tile_n) {
    return "kiln_t" + std::to_string(tile_m) + "x" + std::to_string(tile_n);
  }

  struct Shape {
    int64_t rows = 0;  // of a and d in all
    int64_t e = 0;
    int64_t m_max = 0;  // masked
    int64_t n = 0, k = 0, kb = 0, nb = 0;
    std::vector<int64_t> counts;
  };
  static StatusOr<Shape> ShapeOf(const ShapeAxes& axes) {
    const std::string op = kMasked ? gemm::kGroupedFp8GemmMaskedOp : gemm::kGroupedFp8GemmOp;
    Shape s;
    s.e = AxisValue(axes, "e");
    s.n = AxisValue(axes, "n");
    s.k = AxisValue(axes, "k");
    s.kb = AxisValue(axes, "kb");
    s.nb = AxisValue(axes, "nb");
    if (s.e < 1 || s.e > gemm::kMaxGroups)
      return client::InvalidArgument(op + ": e must be 1.." + std::to_string(gemm::kMaxGroups) + ", found " +
                                     std::to_string(s.e));
    if (s.n % gemm::kAlignElements != 0 || s.k % 16 != 0 || s.n == 0 || s.k == 0)
      return client::InvalidArgument(op + ": n must be a positive multiple of 8 and k of 16, found n=" +
                                     std::to_string(s.n) + ", k=" + std::to_string(s.k));
    if (s.kb != Blocks(s.k) || s.nb != Blocks(s.n))
      return client::InvalidArgument(op + ": kb and nb must be ceil(k / 128) = " + std::to_string(Blocks(s.k)) +
                                     " and ceil(n / 128) = " + std::to_string(Blocks(s.n)));
    if (kMasked) {
      s.m_max = AxisValue(axes, "m_max");
      s.rows = s.e * s.m_max;
      s.counts = MaskedCounts(s.e, s.m_max);
    } else {
      s.rows = AxisValue(axes, "t");
      if (AxisValue(axes, "indptr_len") != s.e + 1)
        return client::InvalidArgument(op + ": indptr_len must be e + 1 = " + std::to_string(s.e + 1) + ", found " +
                                       std::to_string(AxisValue(axes, "indptr_len")));
      s.counts = ContiguousCounts(s.rows, s.e);
    }
    return s;
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& axes, DType dtype) const override {
    KILN_ASSIGN_OR_RETURN(const Shape s, ShapeOf(axes));
    CaseSpec spec;
    const std::vector<int64_t> d_shape = kMasked ? std::vector<int64_t>{s.e, s.m_max, s.n} : std::vector{s.rows, s.n};
    const std::vector<int64_t> a_shape = kMasked ? std::vector<int64_t>{s.e, s.m_max, s.k} : std::vector{s.rows, s.k};
    const std::vector<int64_t> sa_shape = kMasked ? std::vector<int64_t>{s.e, s.m_max, s.kb}
                                                  : std::vector{s.rows, s.kb};
    // masked: d's rows past a group's count keep what they held (kInOut: the refcheck sees it).
    TensorSpec d{"d", DType::kBFloat16, d_shape, kMasked ? TensorRole::kInOut : TensorRole::kOutput};
    d.tolerance = Float64Tolerance(DType::kBFloat16);  // the error of a bf16 GEMM: the op's promise
    spec.tensors = {d,
                    {"a", dtype, a_shape, TensorRole::kInput, -1, 1},
                    {"b", dtype, {s.e, s.n, s.k}, TensorRole::kInput, -1, 1},
                    {"a_scales", DType::kFloat32, sa_shape, TensorRole::kInput, 0.25, 4},
                    {"b_scales", DType::kFloat32, {s.e, s.nb, s.kb}, TensorRole::kInput, 0.25, 4},
                    {kMasked ? "masked_m" : "m_indptr", DType::kInt32, {kMasked ? s.e : s.e + 1}, TensorRole::kInput}};
    spec.tensors[kRows].routine_fills = true;
    int64_t valid = 0, used = 0;
    for (int64_t c : s.counts) {
      valid += c;
      used += c > 0;
    }
    // The valid rows of a (and their scales) and d (bf16), the weights of the groups that have rows.
    spec.bytes = static_cast<double>(valid) * static_cast<double>(s.k + 2 * s.n + 4 * s.kb) +
                 static_cast<double>(used) * static_cast<double>(s.n) * static_cast<double>(s.k);
    spec.flops = 2.0 * static_cast<double>(valid) * static_cast<double>(s.n) * static_cast<double>(s.k);
    return spec;
  }

  static ShapeAxes Axes(int64_t rows_or_m_max, int64_t e, int64_t n, int64_t k) {
    if (kMasked) return {{"e", e}, {"m_max", rows_or_m_max}, {"n", n}, {"k", k}, {"kb", Blocks(k)}, {"nb", Blocks(n)}};
    return {{"t", rows_or_m_max}, {"e", e}, {"n", n}, {"k", k}, {"kb", Blocks(k)}, {"nb", Blocks(n)},
            {"indptr_len", e + 1}};
  }
  ShapeAxes SmallShape() const override { return kMasked ? Axes(70, 4, 136, 144) : Axes(150, 5, 136, 144); }
  // Groups with no row and with one, a group of more rows than a tile, N and K that no tile or
  // scale block divides (several scale blocks per group along N), many groups, a single group.
  std::vector<ShapeAxes> CheckShapes() const override {
    if (kMasked) return {SmallShape(), Axes(1, 1, 8, 16), Axes(129, 3, 264, 528), Axes(16, 64, 128, 128)};
    return {SmallShape(), Axes(1, 1, 8, 16), Axes(700, 3, 264, 528), Axes(1000, 128, 128, 128)};
  }

  Status FillInputs(const CaseSpec& spec, const ShapeAxes& axes, std::mt19937_64& rng,
                    std::vector<HostTensor>* t) const override {
    (void)spec;
    (void)rng;
    KILN_ASSIGN_OR_RETURN(const Shape s, ShapeOf(axes));
    if (kMasked) {
      for (size_t g = 0; g < s.counts.size(); ++g) (*t)[kRows].Set(g, static_cast<double>(s.counts[g]));
    } else {
      int64_t start = 0;
      (*t)[kRows].Set(0, 0);
      for (size_t g = 0; g < s.counts.size(); ++g) {
        start += s.counts[g];
        (*t)[kRows].Set(g + 1, static_cast<double>(start));
      }
    }
    return OkStatus();
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const int64_t e = spec.tensors[kB].shape[0], n = spec.tensors[kB].shape[1], k = spec.tensors[kB].shape[2];
    const int64_t kb = Blocks(k), nb = Blocks(n);
    const int64_t rows = static_cast<int64_t>(spec.tensors[kA].numel()) / k;
    std::vector<double> d(static_cast<size_t>(rows * n));
    for (size_t i = 0; i < d.size(); ++i) d[i] = kMasked ? t[kD].Get(i) : 0.0;  // masked: untouched rows stay
    std::vector<double> arow(static_cast<size_t>(k)), bt(static_cast<size_t>(n * k));
    for (int64_t g = 0; g < e; ++g) {
      int64_t first, count;
      if (kMasked) {
        const int64_t m_max = spec.tensors[kA].shape[1];
        first = g * m_max;
        count = std::clamp<int64_t>(static_cast<int64_t>(t[kRows].Get(static_cast<size_t>(g))), 0, m_max);
      } else {
        first = static_cast<int64_t>(t[kRows].Get(static_cast<size_t>(g)));
        count = static_cast<int64_t>(t[kRows].Get(static_cast<size_t>(g + 1))) - first;
      }
      if (count == 0) continue;
      for (int64_t j = 0; j < n; ++j)
        for (int64_t l = 0; l < k; ++l)
          bt[static_cast<size_t>(j * k + l)] = t[kB].Get(static_cast<size_t>((g * n + j) * k + l)) *
                                               t[kSb].Get(static_cast<size_t>((g * nb + j / 128) * kb + l / 128));
      for (int64_t r = first; r < first + count; ++r) {
        for (int64_t l = 0; l < k; ++l)
          arow[static_cast<size_t>(l)] = t[kA].Get(static_cast<size_t>(r * k + l)) *
                                         t[kSa].Get(static_cast<size_t>(r * kb + l / 128));
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          const double* bj = &bt[static_cast<size_t>(j * k)];
          for (int64_t l = 0; l < k; ++l) sum += arow[static_cast<size_t>(l)] * bj[l];
          d[static_cast<size_t>(r * n + j)] = sum;
        }
      }
    }
    (*expected)[kD] = std::move(d);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& axes,
                              DType dtype) const override {
    (void)spec;
    (void)dtype;
    if (backend != "reference") KILN_RETURN_IF_ERROR(RequireSm90(std::string(name()).c_str()));
    KILN_ASSIGN_OR_RETURN(const Shape s, ShapeOf(axes));
    if (backend == "kiln") {
      return BackendFn([](const TensorSet& t, CUstream stream) {
        return kMasked ? ops::grouped_fp8_gemm_masked(t[kD], t[kA], t[kB], t[kSa], t[kSb], t[kRows], stream)
                       : ops::grouped_fp8_gemm(t[kD], t[kA], t[kB], t[kSa], t[kSb], t[kRows], stream);
      });
    }
    if (backend == "reference") {
      KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_grouped_fp8_gemm", kReferenceSource,
                                                             "kiln_bench_ref_grouped_fp8_gemm", DType::kBFloat16));
      const long long rows = s.rows, n = s.n, k = s.k, m_max = s.m_max;
      const int groups = static_cast<int>(s.e);
      return BackendFn([kernel, rows, n, k, groups, m_max](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 16;
        config.block.y = 16;
        config.grid.x = static_cast<unsigned>((n + 15) / 16);
        config.grid.y = static_cast<unsigned>((rows + 15) / 16);
        config.stream = stream;
        return kernel(config, t[kD].data, t[kA].data, t[kB].data, t[kSa].data, t[kSb].data, t[kRows].data, rows, n, k,
                      groups, m_max);
      });
    }
    for (int tile_m : gemm::kTileMChoices) {
      for (int tile_n : gemm::kTileNChoices) {
        if (backend != TileBackend(tile_m, tile_n)) continue;
        const gemm::GemmTactic tactic{tile_m, tile_n, gemm::GemmMaxStages(tile_m, tile_n, 1, true), 8, 1};
        return BackendFn([tactic](const TensorSet& t, CUstream stream) -> Status {
          const auto plan =
              kMasked ? client::PlanGroupedFp8GemmMasked(t[kD], t[kA], t[kB], t[kSa], t[kSb], t[kRows], "kiln-bench")
                      : client::PlanGroupedFp8Gemm(t[kD], t[kA], t[kB], t[kSa], t[kSb], t[kRows], "kiln-bench");
          KILN_RETURN_IF_ERROR(plan.status());
          return client::LaunchGroupedGemmPlan(*plan, tactic, stream);
        });
      }
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }
};

using Fp8ContiguousRoutine = GroupedFp8GemmRoutine<false>;
using Fp8MaskedRoutine = GroupedFp8GemmRoutine<true>;

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(Fp8ContiguousRoutine);
KILN_BENCH_REGISTER_ROUTINE(Fp8MaskedRoutine);

}  // namespace kiln::bench
