// Routines "grouped_gemm" (kiln::ops::grouped_gemm: contiguous rows, m_indptr),
// "grouped_gemm_masked" (kiln::ops::grouped_gemm_masked: [E, M_max] rows, masked_m) and their
// block-scaled fp8 forms "grouped_fp8_gemm" and "grouped_fp8_gemm_masked": E products sharing N
// and K, no bias. bf16/fp16: d of the case's dtype. fp8: e4m3 a and b, fp32 a_scales (a row per
// row of a, ceil(k / 128) columns) and b_scales [e, ceil(n / 128), ceil(k / 128)], d bf16; inputs
// and scales as fp8_gemm's routine (a, b in [-1, 1] rounded to e4m3, scales in [0.25, 4]).
//
// The groups' rows come from a fixed seed drawn from the shape (so the FLOPs are known before
// the inputs): contiguous, each of the t rows goes to a uniformly drawn expert (uneven counts,
// as routed tokens are), then with 3 or more groups group 1 is emptied and group 2 keeps one
// row; masked, counts uniform in 0..m_max with group 0 at 0 and the last at m_max. The float64 reference is each
// group's product (fp8: of the dequantized matrices).
//
// backends: kiln (the op, heuristic tactic), reference (one thread per element of d, the group
// found by a binary search of m_indptr / from the row, fp32 accumulation — per scaled K block
// for fp8: obviously correct), kiln_t<M>x<N> (the tile forced through the client's internal
// plan, most stages, group_m 8: diagnostic).
#include <algorithm>
#include <random>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "bench/op/routines/hopper_only.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "client/ops/gemm/grouped_gemm_ops.h"
#include "client/ops/gemm/grouped_gemm_plan.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/ops/gemm.h"

namespace kiln::bench {
namespace {

// Both reference kernels (one entry is loaded per routine; T is d's type, and a's and b's for
// bf16/fp16). Rows of no group are untouched.
constexpr const char* kReferenceSource = R"(
// The group of `row`, or -1: masked, row / m_max, valid below masked_m[e]; contiguous, the last
// e with m_indptr[e] <= row < m_indptr[e + 1].
__device__ int GroupOf(const int* rows_of, long long row, int groups, long long m_max) {
  if (m_max > 0) {
    const int e = (int)(row / m_max);
    return row % m_max < rows_of[e] ? e : -1;
  }
  int lo = 0, hi = groups - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (rows_of[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return row >= rows_of[lo] && row < rows_of[lo + 1] ? lo : -1;
}
// d[row, col] = sum_k a[row, k] * b[e, col, k], fp32 accumulation in k order, one rounding; k a
// multiple of 8: eight elements per 16-byte load.
extern "C" __global__ void kiln_bench_ref_grouped_gemm(T* d, const T* a, const T* b, const int* rows_of, long long rows,
                                                       long long n, long long k, int groups, long long m_max) {
  const long long row = (long long)blockIdx.y * 16 + threadIdx.y;
  const long long col = (long long)blockIdx.x * 16 + threadIdx.x;
  if (row >= rows || col >= n) return;
  const int e = GroupOf(rows_of, row, groups, m_max);
  if (e < 0) return;
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
// fp8: the sum of each 128-wide K block in fp32, times its two scales, added in k order.
extern "C" __global__ void kiln_bench_ref_grouped_fp8_gemm(T* d, const unsigned char* a, const unsigned char* b,
                                                           const float* sa, const float* sb, const int* rows_of,
                                                           long long rows, long long n, long long k, int groups,
                                                           long long m_max) {
  const long long row = (long long)blockIdx.y * 16 + threadIdx.y;
  const long long col = (long long)blockIdx.x * 16 + threadIdx.x;
  if (row >= rows || col >= n) return;
  const int e = GroupOf(rows_of, row, groups, m_max);
  if (e < 0) return;
  const long long kb = (k + 127) / 128, nb = (n + 127) / 128;
  float sum = 0.f;
  for (long long blk = 0; blk < kb; ++blk) {
    float part = 0.f;
    for (long long l = blk * 128; l < k && l < blk * 128 + 128; ++l)
      part += E4M3ToF(a[row * k + l]) * E4M3ToF(b[((long long)e * n + col) * k + l]);
    sum += part * sa[row * kb + blk] * sb[((long long)e * nb + col / 128) * kb + blk];
  }
  d[row * n + col] = FromF<T>(sum);
}
)";

// The groups' rows (see the file comment). Contiguous: the rows of each of e groups for t
// rows in all.
std::vector<int64_t> ContiguousCounts(int64_t t, int64_t e) {
  std::vector<int64_t> counts(static_cast<size_t>(e), 0);
  std::mt19937_64 rng(0x6b696c6e + static_cast<uint64_t>(t) * 131 + static_cast<uint64_t>(e));
  std::uniform_int_distribution<int64_t> pick(0, e - 1);
  for (int64_t i = 0; i < t; ++i) ++counts[static_cast<size_t>(pick(rng))];
  if (e >= 3) {
    counts[0] += counts[1];
    counts[1] = 0;
    if (counts[2] > 1) {
      counts[0] += counts[2] - 1;
      counts[2] = 1;
    }
  }
  return counts;
}

// Masked: the valid rows of each of e groups of m_max.
std::vector<int64_t> MaskedCounts(int64_t e, int64_t m_max) {
  std::vector<int64_t> counts(static_cast<size_t>(e));
  std::mt19937_64 rng(0x6d61736b + static_cast<uint64_t>(e) * 131 + static_cast<uint64_t>(m_max));
  std::uniform_int_distribution<int64_t> pick(0, m_max);
  for (auto& c : counts) c = pick(rng);
  counts.front() = 0;
  if (e >= 2) counts.back() = m_max;
  return counts;
}

// The four routines; kMasked picks the layout, kFp8 the inputs. Tensors: d, a, b, (fp8:
// a_scales, b_scales,) the groups' rows.
template <bool kMasked, bool kFp8>
class GroupedGemmRoutine : public Routine {
 public:
  static constexpr size_t kD = 0, kA = 1, kB = 2, kSa = 3, kSb = 4, kRows = kFp8 ? 5 : 3;

  static const char* Op() {
    if (kFp8) return kMasked ? gemm::kGroupedFp8GemmMaskedOp : gemm::kGroupedFp8GemmOp;
    return kMasked ? gemm::kGroupedGemmMaskedOp : gemm::kGroupedGemmOp;
  }
  std::string_view name() const override { return Op(); }
  std::string_view description() const override {
    if (kFp8)
      return kMasked ? "grouped_gemm_masked on block-scaled e4m3 a [e, m_max, k] and b [e, n, k] "
                       "(kiln::ops::grouped_fp8_gemm_masked)"
                     : "grouped_gemm on block-scaled e4m3 a [t, k] and b [e, n, k] (kiln::ops::grouped_fp8_gemm)";
    return kMasked ? "d[e, :masked_m[e]] = a[e, :masked_m[e]] . b[e]^T, a [e, m_max, k], b [e, n, k] "
                     "(kiln::ops::grouped_gemm_masked)"
                   : "d = a_g . b[g]^T per group g of rows m_indptr[g] .. m_indptr[g + 1] - 1, a [t, k], b [e, n, k] "
                     "(kiln::ops::grouped_gemm)";
  }
  std::vector<std::string> axes() const override {
    std::vector<std::string> all = kMasked ? std::vector<std::string>{"e", "m_max", "n", "k"}
                                           : std::vector<std::string>{"t", "e", "n", "k"};
    if (kFp8) all.insert(all.end(), {"kb", "nb"});
    if (!kMasked) all.push_back("indptr_len");
    return all;
  }
  std::vector<DType> dtypes() const override {
    if (kFp8) return {DType::kFloat8E4M3};
    return {DType::kBFloat16, DType::kFloat16};
  }
  std::vector<BackendInfo> backends() const override {
    std::vector<BackendInfo> all = {
        {"kiln", kFp8 ? "the op through kiln::ops (the gemm kernel over groups, block-scaled fp8, heuristic tile)"
                      : "the op through kiln::ops (the gemm kernel over groups, heuristic tile)"},
        {"reference", kFp8 ? "one thread per element of d, fp32 per scaled block (the refcheck baseline)"
                           : "one thread per element of d, fp32 accumulation (the refcheck baseline)"}};
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
    const std::string op = Op();
    Shape s;
    s.e = AxisValue(axes, "e");
    s.n = AxisValue(axes, "n");
    s.k = AxisValue(axes, "k");
    if (s.e < 1 || s.e > gemm::kMaxGroups)
      return client::InvalidArgument(op + ": e must be 1.." + std::to_string(gemm::kMaxGroups) + ", found " +
                                     std::to_string(s.e));
    const int64_t k_align = kFp8 ? 16 : gemm::kAlignElements;  // 16-byte rows
    if (s.n % gemm::kAlignElements != 0 || s.k % k_align != 0 || s.n == 0 || s.k == 0)
      return client::InvalidArgument(op + ": n must be a positive multiple of 8 and k of " + std::to_string(k_align) +
                                     ", found n=" + std::to_string(s.n) + ", k=" + std::to_string(s.k));
    if (kFp8) {
      s.kb = AxisValue(axes, "kb");
      s.nb = AxisValue(axes, "nb");
      if (s.kb != gemm::Fp8ScaleBlocks(s.k) || s.nb != gemm::Fp8ScaleBlocks(s.n))
        return client::InvalidArgument(
            op + ": kb and nb must be ceil(k / 128) = " + std::to_string(gemm::Fp8ScaleBlocks(s.k)) +
            " and ceil(n / 128) = " + std::to_string(gemm::Fp8ScaleBlocks(s.n)));
    }
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
    // [rows, x] or, masked, [e, m_max, x]
    auto rows_of = [&](int64_t x) {
      return kMasked ? std::vector<int64_t>{s.e, s.m_max, x} : std::vector<int64_t>{s.rows, x};
    };
    // masked: d's rows past a group's count keep what they held (kInOut: the refcheck sees it).
    TensorSpec d{"d", kFp8 ? DType::kBFloat16 : dtype, rows_of(s.n),
                 kMasked ? TensorRole::kInOut : TensorRole::kOutput};
    if (kFp8) d.tolerance = Float64Tolerance(DType::kBFloat16);  // the error of a bf16 GEMM: the op's promise
    spec.tensors = {d,
                    {"a", dtype, rows_of(s.k), TensorRole::kInput, -1, 1},
                    {"b", dtype, {s.e, s.n, s.k}, TensorRole::kInput, -1, 1}};
    if (kFp8) {
      spec.tensors.push_back({"a_scales", DType::kFloat32, rows_of(s.kb), TensorRole::kInput, 0.25, 4});
      spec.tensors.push_back({"b_scales", DType::kFloat32, {s.e, s.nb, s.kb}, TensorRole::kInput, 0.25, 4});
    }
    spec.tensors.push_back(
        {kMasked ? "masked_m" : "m_indptr", DType::kInt32, {kMasked ? s.e : s.e + 1}, TensorRole::kInput});
    spec.tensors[kRows].routine_fills = true;
    int64_t valid = 0, used = 0;
    for (int64_t c : s.counts) {
      valid += c;
      used += c > 0;
    }
    // The valid rows of a (fp8: and their scales) and d, and the weights of the groups that have
    // rows (an empty group's weights are not read).
    const double in_es = static_cast<double>(DTypeSize(dtype)), out_es = static_cast<double>(DTypeSize(d.dtype));
    const double row_bytes = static_cast<double>(s.k) * in_es + static_cast<double>(s.n) * out_es +
                             4.0 * static_cast<double>(s.kb);
    spec.bytes = static_cast<double>(valid) * row_bytes +
                 static_cast<double>(used) * static_cast<double>(s.n) * static_cast<double>(s.k) * in_es;
    spec.flops = 2.0 * static_cast<double>(valid) * static_cast<double>(s.n) * static_cast<double>(s.k);
    return spec;
  }

  // fp8's shapes have kb and nb (and K a multiple of 16).
  static ShapeAxes Axes(int64_t rows_or_m_max, int64_t e, int64_t n, int64_t k) {
    ShapeAxes axes = kMasked ? ShapeAxes{{"e", e}, {"m_max", rows_or_m_max}, {"n", n}, {"k", k}}
                             : ShapeAxes{{"t", rows_or_m_max}, {"e", e}, {"n", n}, {"k", k}};
    if (kFp8) axes.insert(axes.end(), {{"kb", gemm::Fp8ScaleBlocks(k)}, {"nb", gemm::Fp8ScaleBlocks(n)}});
    if (!kMasked) axes.push_back({"indptr_len", e + 1});
    return axes;
  }
  ShapeAxes SmallShape() const override {
    const int64_t k = kFp8 ? 144 : 72;
    return kMasked ? Axes(70, 4, 136, k) : Axes(150, 5, 136, k);
  }
  // Groups with no row and with one (the counts' rule), a group of more rows than a tile, N and
  // K that no tile (fp8: no scale block) divides, many groups, and a single group.
  std::vector<ShapeAxes> CheckShapes() const override {
    const int64_t k_min = kFp8 ? 16 : 8, k_odd = kFp8 ? 528 : 520, k_many = kFp8 ? 128 : 64;
    if (kMasked) return {SmallShape(), Axes(1, 1, 8, k_min), Axes(129, 3, 264, k_odd), Axes(16, 64, 128, k_many)};
    return {SmallShape(), Axes(1, 1, 8, k_min), Axes(700, 3, 264, k_odd), Axes(1000, 128, 128, k_many)};
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
    const int64_t kb = gemm::Fp8ScaleBlocks(k), nb = gemm::Fp8ScaleBlocks(n);
    const int64_t rows = static_cast<int64_t>(spec.tensors[kA].numel()) / k;
    // fp8: the dequantized values.
    auto a_at = [&](int64_t r, int64_t l) {
      const double v = t[kA].Get(static_cast<size_t>(r * k + l));
      return kFp8 ? v * t[kSa].Get(static_cast<size_t>(r * kb + l / 128)) : v;
    };
    auto b_at = [&](int64_t g, int64_t j, int64_t l) {
      const double v = t[kB].Get(static_cast<size_t>((g * n + j) * k + l));
      return kFp8 ? v * t[kSb].Get(static_cast<size_t>((g * nb + j / 128) * kb + l / 128)) : v;
    };
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
        for (int64_t l = 0; l < k; ++l) bt[static_cast<size_t>(j * k + l)] = b_at(g, j, l);
      for (int64_t r = first; r < first + count; ++r) {
        for (int64_t l = 0; l < k; ++l) arow[static_cast<size_t>(l)] = a_at(r, l);
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

  // The plan of a call on a tensor set (the forced-tile backends).
  static StatusOr<client::GroupedGemmPlan> PlanOf(const TensorSet& t) {
    if (kFp8)
      return kMasked ? client::PlanGroupedFp8GemmMasked(t[kD], t[kA], t[kB], t[kSa], t[kSb], t[kRows], "kiln-bench")
                     : client::PlanGroupedFp8Gemm(t[kD], t[kA], t[kB], t[kSa], t[kSb], t[kRows], "kiln-bench");
    return kMasked ? client::PlanGroupedGemmMasked(t[kD], t[kA], t[kB], t[kRows], "kiln-bench")
                   : client::PlanGroupedGemm(t[kD], t[kA], t[kB], t[kRows], "kiln-bench");
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& axes,
                              DType dtype) const override {
    (void)spec;
    if (backend != "reference") KILN_RETURN_IF_ERROR(RequireSm90(Op()));
    KILN_ASSIGN_OR_RETURN(const Shape s, ShapeOf(axes));
    if (backend == "kiln") {
      return BackendFn([](const TensorSet& t, CUstream stream) {
        if (kFp8)
          return kMasked ? ops::grouped_fp8_gemm_masked(t[kD], t[kA], t[kB], t[kSa], t[kSb], t[kRows], stream)
                         : ops::grouped_fp8_gemm(t[kD], t[kA], t[kB], t[kSa], t[kSb], t[kRows], stream);
        return kMasked ? ops::grouped_gemm_masked(t[kD], t[kA], t[kB], t[kRows], stream)
                       : ops::grouped_gemm(t[kD], t[kA], t[kB], t[kRows], stream);
      });
    }
    if (backend == "reference") {
      const std::string entry = kFp8 ? "kiln_bench_ref_grouped_fp8_gemm" : "kiln_bench_ref_grouped_gemm";
      KILN_ASSIGN_OR_RETURN(auto kernel,
                            LoadReferenceKernel(entry, kReferenceSource, entry, kFp8 ? DType::kBFloat16 : dtype));
      const long long rows = s.rows, n = s.n, k = s.k, m_max = s.m_max;
      const int groups = static_cast<int>(s.e);
      return BackendFn([kernel, rows, n, k, groups, m_max](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 16;
        config.block.y = 16;
        config.grid.x = static_cast<unsigned>((n + 15) / 16);
        config.grid.y = static_cast<unsigned>((rows + 15) / 16);
        config.stream = stream;
        if (kFp8)
          return kernel(config, t[kD].data, t[kA].data, t[kB].data, t[kSa].data, t[kSb].data, t[kRows].data, rows, n, k,
                        groups, m_max);
        return kernel(config, t[kD].data, t[kA].data, t[kB].data, t[kRows].data, rows, n, k, groups, m_max);
      });
    }
    for (int tile_m : gemm::kTileMChoices) {
      for (int tile_n : gemm::kTileNChoices) {
        if (backend != TileBackend(tile_m, tile_n)) continue;
        const gemm::GemmTactic tactic{tile_m, tile_n, gemm::GemmMaxStages(tile_m, tile_n, 1, true), 8, 1};
        return BackendFn([tactic](const TensorSet& t, CUstream stream) -> Status {
          KILN_ASSIGN_OR_RETURN(const client::GroupedGemmPlan plan, PlanOf(t));
          return client::LaunchGroupedGemmPlan(plan, tactic, stream);
        });
      }
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }
};

using ContiguousRoutine = GroupedGemmRoutine<false, false>;
using MaskedRoutine = GroupedGemmRoutine<true, false>;
using Fp8ContiguousRoutine = GroupedGemmRoutine<false, true>;
using Fp8MaskedRoutine = GroupedGemmRoutine<true, true>;

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(ContiguousRoutine);
KILN_BENCH_REGISTER_ROUTINE(MaskedRoutine);
KILN_BENCH_REGISTER_ROUTINE(Fp8ContiguousRoutine);
KILN_BENCH_REGISTER_ROUTINE(Fp8MaskedRoutine);

}  // namespace kiln::bench
