// Routine "fp8_gemm" (kiln::ops::fp8_gemm): block-scaled fp8, d = sum over 128-wide K blocks of
// a_scales · b_scales · (a_blk · b_blkᵀ), a [m, k] and b [n, k] e4m3, a_scales [m, kb] and
// b_scales [nb, kb] fp32 (kb = ceil(k / 128), nb = ceil(n / 128)), d bf16 (the fp32 output is
// exercised by the [gpu][gemm] client tests). The case's dtype is the inputs' (fp8_e4m3).
//
// Inputs: a and b drawn in [-1, 1] and rounded to e4m3; scales in [0.25, 4] (a per-block
// quantizer's amax / 448 spans a few octaves). The float64 reference is the product of the
// dequantized matrices, so the refcheck measures the kernel's whole error: the tensor cores'
// in-block sums, the promotion, and the rounding to bf16.
//
// backends: kiln (the op, heuristic tactic), reference (one thread per element of d, fp32 in
// k order with each block scaled: obviously correct), kiln_t<M>x<N>[m2] (the tile forced through
// the client's internal plan, most stages, group_m 8, m2 as multicast pairs of the 128-row tiles:
// a diagnostic tactic control).
#include <cmath>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "bench/op/routines/hopper_only.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "client/ops/gemm/fp8_gemm_ops.h"
#include "client/ops/gemm/fp8_gemm_plan.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/ops/gemm.h"

namespace kiln::bench {
namespace {

// T is d's type (bf16); E4M3ToF is the prelude's (reference_kernel.h).
constexpr const char* kReferenceSource =
    R"(extern "C" __global__ void kiln_bench_ref_fp8_gemm(T* d, const unsigned char* a, const unsigned char* b,
                                                   const float* sa, const float* sb, long long m, long long n,
                                                   long long k) {
  const long long row = (long long)blockIdx.y * 16 + threadIdx.y;
  const long long col = (long long)blockIdx.x * 16 + threadIdx.x;
  if (row >= m || col >= n) return;
  const long long kb = (k + 127) / 128;
  float sum = 0.f;
  for (long long blk = 0; blk < kb; ++blk) {
    float part = 0.f;
    for (long long l = blk * 128; l < k && l < blk * 128 + 128; ++l)
      part += E4M3ToF(a[row * k + l]) * E4M3ToF(b[col * k + l]);
    sum += part * sa[row * kb + blk] * sb[(col / 128) * kb + blk];
  }
  d[row * n + col] = FromF<T>(sum);
}
)";

class Fp8GemmRoutine : public Routine {
 public:
  std::string_view name() const override { return gemm::kFp8GemmOp; }
  std::string_view description() const override {
    return "d = block-scaled a . b^T, e4m3 a [m, k] and b [n, k], fp32 scales per 1x128 / 128x128 "
           "(kiln::ops::fp8_gemm)";
  }
  std::vector<std::string> axes() const override { return {"m", "n", "k", "kb", "nb"}; }
  std::vector<DType> dtypes() const override { return {DType::kFloat8E4M3}; }
  std::vector<BackendInfo> backends() const override {
    std::vector<BackendInfo> all = {
        {"kiln", "the op through kiln::ops (TMA + fp8 wgmma, block-scaled promotion, tactic from the heuristic)"},
        {"reference", "one thread per element of d, fp32 per scaled block (the refcheck baseline)"}};
    for (int tile_m : gemm::kTileMChoices)
      for (int tile_n : gemm::kTileNChoices)
        all.push_back({TileBackend(tile_m, tile_n), "kiln with the tile forced, most stages, group_m 8 (diagnostic)"});
    for (int tile_n : gemm::kTileNChoices)
      all.push_back({TileBackend(128, tile_n, 2),
                     "kiln with the tile forced as multicast pairs sharing B's tile, most stages (diagnostic)"});
    return all;
  }

  static std::string TileBackend(int tile_m, int tile_n, int multicast = 1) {
    return "kiln_t" + std::to_string(tile_m) + "x" + std::to_string(tile_n) +
           (multicast > 1 ? "m" + std::to_string(multicast) : "");
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t m = AxisValue(shape, "m"), n = AxisValue(shape, "n"), k = AxisValue(shape, "k");
    const int64_t kb = AxisValue(shape, "kb"), nb = AxisValue(shape, "nb");
    if (n % gemm::kAlignElements != 0 || k % 16 != 0)
      return client::InvalidArgument("fp8_gemm: n must be a multiple of 8 and k of 16, found n=" + std::to_string(n) +
                                     ", k=" + std::to_string(k));
    if (kb != gemm::Fp8ScaleBlocks(k) || nb != gemm::Fp8ScaleBlocks(n))
      return client::InvalidArgument(
          "fp8_gemm: kb and nb must be ceil(k / 128) = " + std::to_string(gemm::Fp8ScaleBlocks(k)) +
          " and ceil(n / 128) = " + std::to_string(gemm::Fp8ScaleBlocks(n)) + ", found " + std::to_string(kb) +
          " and " + std::to_string(nb));
    CaseSpec spec;
    TensorSpec d{"d", DType::kBFloat16, {m, n}, TensorRole::kOutput};
    d.tolerance = Float64Tolerance(DType::kBFloat16);  // the error of a bf16 GEMM: the op's promise
    spec.tensors = {d,
                    {"a", dtype, {m, k}, TensorRole::kInput, -1, 1},
                    {"b", dtype, {n, k}, TensorRole::kInput, -1, 1},
                    {"a_scales", DType::kFloat32, {m, kb}, TensorRole::kInput, 0.25, 4},
                    {"b_scales", DType::kFloat32, {nb, kb}, TensorRole::kInput, 0.25, 4}};
    spec.bytes = static_cast<double>(m) * k + static_cast<double>(n) * k + static_cast<double>(m) * n * 2 +
                 4.0 * static_cast<double>(m * kb + nb * kb);
    spec.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    return spec;
  }

  ShapeAxes SmallShape() const override { return Shape(64, 256, 256); }
  // One row; the smallest n and k; sizes no tile or scale block divides (m 127 and 1000, n 264
  // and 136, k 144 and 528: a partial last K block); a block that walks several tiles (m 4097).
  std::vector<ShapeAxes> CheckShapes() const override {
    return {SmallShape(),         Shape(1, 64, 128),     Shape(7, 8, 16),
            Shape(127, 264, 144), Shape(1000, 136, 528), Shape(4097, 264, 128)};
  }
  static ShapeAxes Shape(int64_t m, int64_t n, int64_t k) {
    return {{"m", m}, {"n", n}, {"k", k}, {"kb", gemm::Fp8ScaleBlocks(k)}, {"nb", gemm::Fp8ScaleBlocks(n)}};
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const size_t m = static_cast<size_t>(spec.tensors[1].shape[0]), k = static_cast<size_t>(spec.tensors[1].shape[1]);
    const size_t n = static_cast<size_t>(spec.tensors[2].shape[0]);
    std::vector<double> d;
    Fp8GemmReference(t[1], t[2], t[3], t[4], m, n, k, &d);
    (*expected)[0] = std::move(d);
    return OkStatus();
  }

  // float64: the product of the dequantized matrices, a[i, l] sa[i, l / 128] times
  // b[j, l] sb[j / 128, l / 128].
  static void Fp8GemmReference(const HostTensor& a, const HostTensor& b, const HostTensor& sa, const HostTensor& sb,
                               size_t m, size_t n, size_t k, std::vector<double>* d) {
    const size_t kb = static_cast<size_t>(gemm::Fp8ScaleBlocks(static_cast<int64_t>(k)));
    std::vector<double> bt(n * k);
    for (size_t j = 0; j < n; ++j)
      for (size_t l = 0; l < k; ++l) bt[j * k + l] = b.Get(j * k + l) * sb.Get((j / 128) * kb + l / 128);
    d->assign(m * n, 0.0);
    std::vector<double> row(k);
    for (size_t i = 0; i < m; ++i) {
      for (size_t l = 0; l < k; ++l) row[l] = a.Get(i * k + l) * sa.Get(i * kb + l / 128);
      for (size_t j = 0; j < n; ++j) {
        double sum = 0;
        const double* bj = &bt[j * k];
        for (size_t l = 0; l < k; ++l) sum += row[l] * bj[l];
        (*d)[i * n + j] = sum;
      }
    }
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    (void)dtype;
    if (backend != "reference") KILN_RETURN_IF_ERROR(RequireSm90(std::string(name()).c_str()));
    if (backend == "kiln") {
      return BackendFn(
          [](const TensorSet& t, CUstream stream) { return ops::fp8_gemm(t[0], t[1], t[2], t[3], t[4], stream); });
    }
    if (backend == "reference") {
      KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_fp8_gemm", kReferenceSource,
                                                             "kiln_bench_ref_fp8_gemm", DType::kBFloat16));
      const long long m = AxisValue(shape, "m"), n = AxisValue(shape, "n"), k = AxisValue(shape, "k");
      return BackendFn([kernel, m, n, k](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 16;
        config.block.y = 16;
        config.grid.x = static_cast<unsigned>((n + 15) / 16);
        config.grid.y = static_cast<unsigned>((m + 15) / 16);
        config.stream = stream;
        return kernel(config, t[0].data, t[1].data, t[2].data, t[3].data, t[4].data, m, n, k);
      });
    }
    for (int tile_m : gemm::kTileMChoices) {
      for (int tile_n : gemm::kTileNChoices) {
        for (int multicast : gemm::kMulticastChoices) {
          if (backend != TileBackend(tile_m, tile_n, multicast)) continue;
          const gemm::GemmTactic tactic{tile_m, tile_n, gemm::GemmMaxStages(tile_m, tile_n, 1, false, multicast),
                                        8,      1,      multicast};
          return BackendFn([tactic](const TensorSet& t, CUstream stream) -> Status {
            KILN_ASSIGN_OR_RETURN(auto plan, client::PlanFp8Gemm(t[0], t[1], t[2], t[3], t[4], "kiln-bench fp8_gemm"));
            return client::LaunchFp8GemmPlan(plan, tactic, stream);
          });
        }
      }
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(Fp8GemmRoutine);

}  // namespace kiln::bench
