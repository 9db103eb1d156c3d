// Routine "gemm" (kiln::ops::gemm): d = a · bᵀ with a [m, k], b [n, k] K-major and d of the
// case's dtype; bias and beta · c are exercised by the [gpu][gemm] client tests, and the
// timed case is the plain product (what cuBLAS is compared on in bench/compare_torch.py).
//
// backends: kiln (the op, heuristic tactic), reference (one thread per element of d, fp32
// accumulation: obviously correct, and slow: 16-byte loads along K keep it within seconds at
// the Llama shapes), kiln_t<M>x<N>[k<split>|m<multicast>] (the op with that tile, split or
// multicast forced through the client's internal plan, at its most stages and group_m 8: a
// diagnostic tactic control, to measure the heuristic's choice against the others).
#include <cmath>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "bench/op/routines/hopper_only.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "client/ops/gemm/gemm_ops.h"
#include "client/ops/gemm/gemm_plan.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/ops/gemm.h"

namespace kiln::bench {
namespace {

constexpr const char* kReferenceSource = R"(
// d[m, n] = sum_k a[m, k] * b[n, k], fp32 accumulation in k order, one rounding; 16x16 threads
// a block over a 16x16 tile of d. k is a multiple of 8: eight elements per 16-byte load.
extern "C" __global__ void kiln_bench_ref_gemm(T* d, const T* a, const T* b, long long m, long long n, long long k) {
  const long long row = (long long)blockIdx.y * 16 + threadIdx.y;
  const long long col = (long long)blockIdx.x * 16 + threadIdx.x;
  if (row >= m || col >= n) return;
  const uint4* pa = reinterpret_cast<const uint4*>(a + row * k);
  const uint4* pb = reinterpret_cast<const uint4*>(b + col * k);
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

class GemmRoutine : public Routine {
 public:
  std::string_view name() const override { return gemm::kGemmOp; }
  std::string_view description() const override { return "d = a . b^T, a [m, k], b [n, k] (kiln::ops::gemm)"; }
  std::vector<std::string> axes() const override { return {"m", "n", "k"}; }
  std::vector<DType> dtypes() const override { return {DType::kBFloat16, DType::kFloat16}; }
  std::vector<BackendInfo> backends() const override {
    std::vector<BackendInfo> all = {{"kiln", "the op through kiln::ops (TMA + wgmma, tactic from the heuristic)"},
                                    {"reference",
                                     "one thread per element of d, fp32 accumulation (the refcheck baseline)"}};
    for (int tile_m : gemm::kTileMChoices)
      for (int tile_n : gemm::kTileNChoices)
        for (const Cluster& c : Clusters())
          all.push_back({TileBackend(tile_m, tile_n, c),
                         c.split > 1 ? "kiln with the tile and split-K forced, most stages, group_m 8 (diagnostic)"
                         : c.multicast > 1 ? "kiln with the tile and B multicast forced, most stages, group_m 8 "
                                             "(diagnostic)"
                                           : "kiln with the tile forced, most stages, group_m 8 (diagnostic)"});
    return all;
  }

  // What a cluster of the forced tactic does: split K, or share B (not both).
  struct Cluster {
    int split = 1;
    int multicast = 1;
  };
  static std::vector<Cluster> Clusters() {
    std::vector<Cluster> out;
    for (int split : gemm::kSplitKChoices) out.push_back({split, 1});
    for (int multicast : gemm::kMulticastChoices)
      if (multicast > 1) out.push_back({1, multicast});
    return out;
  }

  // kiln_t128x256, kiln_t64x128k4 with K split over clusters of 4, kiln_t128x256m2 with B's tile
  // shared by clusters of 2.
  static std::string TileBackend(int tile_m, int tile_n, const Cluster& c) {
    return "kiln_t" + std::to_string(tile_m) + "x" + std::to_string(tile_n) +
           (c.split > 1 ? "k" + std::to_string(c.split) : "") +
           (c.multicast > 1 ? "m" + std::to_string(c.multicast) : "");
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t m = AxisValue(shape, "m"), n = AxisValue(shape, "n"), k = AxisValue(shape, "k");
    if (n % gemm::kAlignElements != 0 || k % gemm::kAlignElements != 0)
      return client::InvalidArgument("gemm: n and k must be multiples of 8, found n=" + std::to_string(n) +
                                     ", k=" + std::to_string(k));
    CaseSpec spec;
    // Inputs in [-1, 1]: |d| grows like sqrt(k), and the dtype's relative tolerance holds.
    spec.tensors = {{"d", dtype, {m, n}, TensorRole::kOutput},
                    {"a", dtype, {m, k}, TensorRole::kInput, -1, 1},
                    {"b", dtype, {n, k}, TensorRole::kInput, -1, 1}};
    const double es = static_cast<double>(DTypeSize(dtype));
    spec.bytes = (static_cast<double>(m) * k + static_cast<double>(n) * k + static_cast<double>(m) * n) * es;
    spec.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    return spec;
  }

  ShapeAxes SmallShape() const override { return {{"m", 64}, {"n", 256}, {"k", 128}}; }
  // One row; sizes no tile divides (m 127 and 1000, n 264 and 136, k 72 and 520); a block
  // that walks several tiles (m 4097: more tiles than SMs).
  std::vector<ShapeAxes> CheckShapes() const override {
    return {SmallShape(),
            {{"m", 1}, {"n", 64}, {"k", 64}},
            {{"m", 7}, {"n", 8}, {"k", 8}},
            {{"m", 127}, {"n", 264}, {"k", 72}},
            {{"m", 1000}, {"n", 136}, {"k", 520}},
            {{"m", 4097}, {"n", 264}, {"k", 64}}};
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    std::vector<double> d;
    GemmReference(t[1], t[2], static_cast<size_t>(spec.tensors[1].shape[0]),
                  static_cast<size_t>(spec.tensors[2].shape[0]), static_cast<size_t>(spec.tensors[1].shape[1]), &d);
    (*expected)[0] = std::move(d);
    return OkStatus();
  }

  // float64: d[i, j] = sum_l a[i, l] b[j, l].
  static void GemmReference(const HostTensor& a, const HostTensor& b, size_t m, size_t n, size_t k,
                            std::vector<double>* d) {
    std::vector<double> bt(n * k);
    for (size_t i = 0; i < n * k; ++i) bt[i] = b.Get(i);
    d->assign(m * n, 0.0);
    std::vector<double> row(k);
    for (size_t i = 0; i < m; ++i) {
      for (size_t l = 0; l < k; ++l) row[l] = a.Get(i * k + l);
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
    if (backend != "reference") KILN_RETURN_IF_ERROR(RequireSm90(std::string(name()).c_str()));
    if (backend == "kiln") {
      return BackendFn(
          [](const TensorSet& t, CUstream stream) { return ops::gemm(t[0], t[1], t[2], nullptr, nullptr, 0, stream); });
    }
    if (backend == "reference") {
      KILN_ASSIGN_OR_RETURN(auto kernel,
                            LoadReferenceKernel("kiln_bench_ref_gemm", kReferenceSource, "kiln_bench_ref_gemm", dtype));
      const long long m = AxisValue(shape, "m"), n = AxisValue(shape, "n"), k = AxisValue(shape, "k");
      return BackendFn([kernel, m, n, k](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 16;
        config.block.y = 16;
        config.grid.x = static_cast<unsigned>((n + 15) / 16);
        config.grid.y = static_cast<unsigned>((m + 15) / 16);
        config.stream = stream;
        return kernel(config, t[0].data, t[1].data, t[2].data, m, n, k);
      });
    }
    for (int tile_m : gemm::kTileMChoices) {
      for (int tile_n : gemm::kTileNChoices) {
        for (const Cluster& c : Clusters()) {
          if (backend != TileBackend(tile_m, tile_n, c)) continue;
          const gemm::GemmTactic tactic{
              tile_m, tile_n,  gemm::GemmMaxStages(tile_m, tile_n, c.split, false, c.multicast),
              8,      c.split, c.multicast};
          return BackendFn([tactic](const TensorSet& t, CUstream stream) -> Status {
            KILN_ASSIGN_OR_RETURN(auto plan,
                                  client::PlanGemm(t[0], t[1], t[2], nullptr, nullptr, 0, "kiln-bench gemm"));
            return client::LaunchGemmPlan(plan, tactic, stream);
          });
        }
      }
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(GemmRoutine);

}  // namespace kiln::bench
