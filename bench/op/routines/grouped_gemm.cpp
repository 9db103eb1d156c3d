// Routines "grouped_gemm" (kiln::ops::grouped_gemm: contiguous rows, m_indptr) and
// "grouped_gemm_masked" (kiln::ops::grouped_gemm_masked: [E, M_max] rows, masked_m): E
// products sharing N and K, d of the case's dtype, no bias.
//
// The groups' rows come from a fixed seed drawn from the shape (so the FLOPs are known before
// the inputs): contiguous, each of the t rows goes to a uniformly drawn expert (uneven counts,
// as routed tokens are), then with 3 or more groups group 1 is emptied and group 2 keeps one
// row; masked, counts uniform in 0..m_max with group 0 at 0 and the last at m_max.
//
// backends: kiln (the op, heuristic tactic), reference (one thread per element of d, the group
// found by a binary search of m_indptr / from the row: obviously correct), kiln_t<M>x<N> (the
// tile forced through the client's internal plan, most stages, group_m 8: diagnostic).
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

constexpr const char* kReferenceSource = R"(
// d[row, col] = sum_k a[row, k] * b[e, col, k] for the group e of `row`, fp32 accumulation in
// k order, one rounding; rows of no group untouched. masked: group row / m_max, valid below
// masked_m[e]; contiguous: the last e with m_indptr[e] <= row < m_indptr[e + 1].
extern "C" __global__ void kiln_bench_ref_grouped_gemm(T* d, const T* a, const T* b, const int* rows_of, long long rows,
                                                       long long n, long long k, int groups, long long m_max) {
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
  const uint4* pa = reinterpret_cast<const uint4*>(a + row * k);
  const uint4* pb = reinterpret_cast<const uint4*>(b + ((long long)e * n + col) * k);
  float sum = 0.f;
  for (long long i = 0; i < k / 8; ++i) {
    const uint4 va = pa[i], vb = pb[i];
    const T* ea = reinterpret_cast<const T*>(&va);
    const T* eb = reinterpret_cast<const T*>(&vb);
    for (int j = 0; j < 8; ++j) sum += ToF(ea[j]) * ToF(eb[j]);
  }
  d[row * n + col] = FromF<T>(sum);
}
)";

// Both routines; kMasked picks the layout. Tensors: d, a, b, the groups' rows.
template <bool kMasked>
class GroupedGemmRoutine : public Routine {
 public:
  static constexpr size_t kD = 0, kA = 1, kB = 2, kRows = 3;

  std::string_view name() const override { return kMasked ? gemm::kGroupedGemmMaskedOp : gemm::kGroupedGemmOp; }
  std::string_view description() const override {
    return kMasked ? "d[e, :masked_m[e]] = a[e, :masked_m[e]] . b[e]^T, a [e, m_max, k], b [e, n, k] "
                     "(kiln::ops::grouped_gemm_masked)"
                   : "d = a_g . b[g]^T per group g of rows m_indptr[g] .. m_indptr[g + 1] - 1, a [t, k], b [e, n, k] "
                     "(kiln::ops::grouped_gemm)";
  }
  std::vector<std::string> axes() const override {
    if (kMasked) return {"e", "m_max", "n", "k"};
    return {"t", "e", "n", "k", "indptr_len"};
  }
  std::vector<DType> dtypes() const override { return {DType::kBFloat16, DType::kFloat16}; }
  std::vector<BackendInfo> backends() const override {
    std::vector<BackendInfo> all = {{"kiln", "the op through kiln::ops (the gemm kernel over groups, heuristic tile)"},
                                    {"reference", "one thread per element of d, fp32 accumulation (the refcheck "
                                                  "baseline)"}};
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
    int64_t n = 0, k = 0;
    std::vector<int64_t> counts;
  };
  static StatusOr<Shape> ShapeOf(const ShapeAxes& axes) {
    Shape s;
    s.e = AxisValue(axes, "e");
    s.n = AxisValue(axes, "n");
    s.k = AxisValue(axes, "k");
    if (s.e < 1 || s.e > gemm::kMaxGroups)
      return client::InvalidArgument(std::string(kMasked ? "grouped_gemm_masked" : "grouped_gemm") + ": e must be 1.." +
                                     std::to_string(gemm::kMaxGroups) + ", found " + std::to_string(s.e));
    if (s.n % gemm::kAlignElements != 0 || s.k % gemm::kAlignElements != 0 || s.n == 0 || s.k == 0)
      return client::InvalidArgument("grouped_gemm: n and k must be positive multiples of 8, found n=" +
                                     std::to_string(s.n) + ", k=" + std::to_string(s.k));
    if (kMasked) {
      s.m_max = AxisValue(axes, "m_max");
      s.rows = s.e * s.m_max;
      s.counts = MaskedCounts(s.e, s.m_max);
    } else {
      s.rows = AxisValue(axes, "t");
      if (AxisValue(axes, "indptr_len") != s.e + 1)
        return client::InvalidArgument("grouped_gemm: indptr_len must be e + 1 = " + std::to_string(s.e + 1) +
                                       ", found " + std::to_string(AxisValue(axes, "indptr_len")));
      s.counts = ContiguousCounts(s.rows, s.e);
    }
    return s;
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& axes, DType dtype) const override {
    KILN_ASSIGN_OR_RETURN(const Shape s, ShapeOf(axes));
    CaseSpec spec;
    // masked: d's rows past a group's count keep what they held (kInOut: the refcheck sees it).
    const std::vector<int64_t> d_shape = kMasked ? std::vector<int64_t>{s.e, s.m_max, s.n} : std::vector{s.rows, s.n};
    const std::vector<int64_t> a_shape = kMasked ? std::vector<int64_t>{s.e, s.m_max, s.k} : std::vector{s.rows, s.k};
    spec.tensors = {{"d", dtype, d_shape, kMasked ? TensorRole::kInOut : TensorRole::kOutput},
                    {"a", dtype, a_shape, TensorRole::kInput, -1, 1},
                    {"b", dtype, {s.e, s.n, s.k}, TensorRole::kInput, -1, 1},
                    {kMasked ? "masked_m" : "m_indptr", DType::kInt32, {kMasked ? s.e : s.e + 1}, TensorRole::kInput}};
    spec.tensors[kRows].routine_fills = true;
    int64_t valid = 0, used = 0;
    for (int64_t c : s.counts) {
      valid += c;
      used += c > 0;
    }
    const double es = static_cast<double>(DTypeSize(dtype));
    // The valid rows of a and d, and the weights of the groups that have rows (an empty group's
    // weights are not read).
    spec.bytes = (static_cast<double>(valid) * static_cast<double>(s.k + s.n) +
                  static_cast<double>(used) * static_cast<double>(s.n) * static_cast<double>(s.k)) *
                 es;
    spec.flops = 2.0 * static_cast<double>(valid) * static_cast<double>(s.n) * static_cast<double>(s.k);
    return spec;
  }

  ShapeAxes SmallShape() const override {
    if (kMasked) return {{"e", 4}, {"m_max", 70}, {"n", 136}, {"k", 72}};
    return {{"t", 150}, {"e", 5}, {"n", 136}, {"k", 72}, {"indptr_len", 6}};
  }
  // Groups with no row and with one (the counts' rule), a group of more rows than a tile, N and
  // K that no tile divides, many groups, and a single group.
  std::vector<ShapeAxes> CheckShapes() const override {
    if (kMasked)
      return {SmallShape(),
              {{"e", 1}, {"m_max", 1}, {"n", 8}, {"k", 8}},
              {{"e", 3}, {"m_max", 129}, {"n", 264}, {"k", 520}},
              {{"e", 64}, {"m_max", 16}, {"n", 128}, {"k", 64}}};
    return {SmallShape(),
            {{"t", 1}, {"e", 1}, {"n", 8}, {"k", 8}, {"indptr_len", 2}},
            {{"t", 700}, {"e", 3}, {"n", 264}, {"k", 520}, {"indptr_len", 4}},
            {{"t", 1000}, {"e", 128}, {"n", 128}, {"k", 64}, {"indptr_len", 129}}};
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
    const int64_t rows = static_cast<int64_t>(spec.tensors[kA].numel()) / k;
    std::vector<double> d(static_cast<size_t>(rows * n));
    for (size_t i = 0; i < d.size(); ++i) d[i] = kMasked ? t[kD].Get(i) : 0.0;  // masked: untouched rows stay
    std::vector<double> arow(static_cast<size_t>(k));
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
      for (int64_t r = first; r < first + count; ++r) {
        for (int64_t l = 0; l < k; ++l) arow[static_cast<size_t>(l)] = t[kA].Get(static_cast<size_t>(r * k + l));
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          const size_t b0 = static_cast<size_t>((g * n + j) * k);
          for (int64_t l = 0; l < k; ++l) sum += arow[static_cast<size_t>(l)] * t[kB].Get(b0 + static_cast<size_t>(l));
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
    if (backend != "reference") KILN_RETURN_IF_ERROR(RequireSm90(std::string(name()).c_str()));
    KILN_ASSIGN_OR_RETURN(const Shape s, ShapeOf(axes));
    if (backend == "kiln") {
      return BackendFn([](const TensorSet& t, CUstream stream) {
        return kMasked ? ops::grouped_gemm_masked(t[kD], t[kA], t[kB], t[kRows], stream)
                       : ops::grouped_gemm(t[kD], t[kA], t[kB], t[kRows], stream);
      });
    }
    if (backend == "reference") {
      KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_grouped_gemm", kReferenceSource,
                                                             "kiln_bench_ref_grouped_gemm", dtype));
      const long long rows = s.rows, n = s.n, k = s.k, m_max = s.m_max;
      const int groups = static_cast<int>(s.e);
      return BackendFn([kernel, rows, n, k, groups, m_max](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 16;
        config.block.y = 16;
        config.grid.x = static_cast<unsigned>((n + 15) / 16);
        config.grid.y = static_cast<unsigned>((rows + 15) / 16);
        config.stream = stream;
        return kernel(config, t[kD].data, t[kA].data, t[kB].data, t[kRows].data, rows, n, k, groups, m_max);
      });
    }
    for (int tile_m : gemm::kTileMChoices) {
      for (int tile_n : gemm::kTileNChoices) {
        if (backend != TileBackend(tile_m, tile_n)) continue;
        const gemm::GemmTactic tactic{tile_m, tile_n, gemm::GemmMaxStages(tile_m, tile_n, 1, true), 8, 1};
        return BackendFn([tactic](const TensorSet& t, CUstream stream) -> Status {
          const auto plan = kMasked ? client::PlanGroupedGemmMasked(t[kD], t[kA], t[kB], t[kRows], "kiln-bench")
                                    : client::PlanGroupedGemm(t[kD], t[kA], t[kB], t[kRows], "kiln-bench");
          KILN_RETURN_IF_ERROR(plan.status());
          return client::LaunchGroupedGemmPlan(*plan, tactic, stream);
        });
      }
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }
};

using ContiguousRoutine = GroupedGemmRoutine<false>;
using MaskedRoutine = GroupedGemmRoutine<true>;

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(ContiguousRoutine);
KILN_BENCH_REGISTER_ROUTINE(MaskedRoutine);

}  // namespace kiln::bench
