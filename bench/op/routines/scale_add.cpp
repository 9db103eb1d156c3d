// Routine "scale_add" (kiln::ops::scale_add): out = alpha * x + y over n elements.
//
// backends: kiln (the public op), reference (one thread per element, fp32 math).
#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "kiln/ops/elementwise.h"

namespace kiln::bench {
namespace {

// The scale every case uses: not 1, so a kernel that ignores alpha fails the check.
constexpr float kAlpha = 0.75f;

constexpr const char* kReferenceSource = R"(
extern "C" __global__ void kiln_bench_ref_scale_add(T* out, const T* x, const T* y, long long n, float alpha) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    out[i] = FromF<T>(alpha * ToF(x[i]) + ToF(y[i]));
}
)";

class ScaleAddRoutine : public Routine {
 public:
  std::string_view name() const override { return "scale_add"; }
  std::string_view description() const override { return "out = alpha * x + y, alpha 0.75 (kiln::ops::scale_add)"; }
  std::vector<std::string> axes() const override { return {"n"}; }
  std::vector<DType> dtypes() const override { return {DType::kFloat16, DType::kBFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", "the op through kiln::ops"},
            {"reference", "one thread per element, fp32 math (the refcheck baseline)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t n = AxisValue(shape, "n");
    CaseSpec spec;
    spec.tensors = {{"out", dtype, {n}, TensorRole::kOutput},
                    {"x", dtype, {n}, TensorRole::kInput},
                    {"y", dtype, {n}, TensorRole::kInput}};
    spec.bytes = 3.0 * static_cast<double>(n) * static_cast<double>(DTypeSize(dtype));
    return spec;
  }

  ShapeAxes SmallShape() const override { return {{"n", 1000}}; }
  // One element; a count no block size divides; several blocks' worth.
  std::vector<ShapeAxes> CheckShapes() const override { return {SmallShape(), {{"n", 1}}, {{"n", 4097}}, {{"n", 1 << 20}}}; }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    std::vector<double> out(t[1].size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = double{kAlpha} * t[1].Get(i) + t[2].Get(i);
    (*expected)[0] = std::move(out);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    if (backend == "kiln")
      return BackendFn([](const TensorSet& t, CUstream stream) { return ops::scale_add(t[0], t[1], t[2], kAlpha, stream); });
    if (backend == "reference") {
      KILN_ASSIGN_OR_RETURN(Kernel kernel,
                            LoadReferenceKernel("kiln_bench_ref_scale_add", kReferenceSource, "kiln_bench_ref_scale_add", dtype));
      const long long n = AxisValue(shape, "n");
      return BackendFn([kernel, n](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 256;
        config.grid.x = static_cast<unsigned>(std::min<long long>((n + 255) / 256, 1 << 20));
        config.stream = stream;
        return kernel(config, t[0].data, t[1].data, t[2].data, n, kAlpha);
      });
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(ScaleAddRoutine);

}  // namespace kiln::bench
