// Routines "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul" (kiln/ops/activation.h):
// input [rows, 2d] = [x | y] per row, out [rows, d] = act(x) * y.
//
// backends: kiln (the public op), reference (one thread per output element, fp32 math).
#include <cmath>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "client/core/api/invalid_argument.h"
#include "kiln/ops/activation.h"

namespace kiln::bench {
namespace {

enum class Act { kSilu, kGelu, kGeluTanh };

constexpr const char* kReferenceSource = R"(
__device__ float Act(float x) {
#if KILN_REF_ACT == 0
  return x / (1.0f + expf(-x));
#elif KILN_REF_ACT == 1
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
#else
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
#endif
}

// One thread per output element (grid-stride), fp32 math, one rounding.
extern "C" __global__ void kiln_bench_ref_act_and_mul(T* out, const T* in, long long rows, long long d) {
  const long long n = rows * d;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long r = i / d, c = i % d;
    const float x = ToF(in[r * 2 * d + c]);
    const float y = ToF(in[r * 2 * d + d + c]);
    out[i] = FromF<T>(Act(x) * y);
  }
}
)";

double ActOf(Act act, double x) {
  switch (act) {
    case Act::kSilu: return x / (1.0 + std::exp(-x));
    case Act::kGelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Act::kGeluTanh: return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return 0;
}

class ActAndMulRoutine : public Routine {
 public:
  explicit ActAndMulRoutine(Act act) : act_(act) {}

  std::string_view name() const override {
    return act_ == Act::kSilu ? "silu_and_mul" : act_ == Act::kGelu ? "gelu_and_mul" : "gelu_tanh_and_mul";
  }
  std::string_view description() const override {
    return act_ == Act::kSilu   ? "out = silu(x) * y over input [rows, 2d] = [x | y] (kiln::ops::silu_and_mul)"
           : act_ == Act::kGelu ? "out = gelu(x) * y, exact erf (kiln::ops::gelu_and_mul)"
                                : "out = gelu_tanh(x) * y (kiln::ops::gelu_tanh_and_mul)";
  }
  std::vector<std::string> axes() const override { return {"rows", "d", "d2"}; }
  std::vector<DType> dtypes() const override { return {DType::kFloat16, DType::kBFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", "the op through kiln::ops"},
            {"reference", "one thread per output element, fp32 math (the refcheck baseline)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t rows = AxisValue(shape, "rows"), d = AxisValue(shape, "d"), d2 = AxisValue(shape, "d2");
    if (d2 != 2 * d)
      return client::InvalidArgument(std::string(name()) + ": d2=" + std::to_string(d2) +
                                     " must be 2 * d=" + std::to_string(2 * d));
    CaseSpec spec;
    spec.tensors = {{"out", dtype, {rows, d}, TensorRole::kOutput}, {"input", dtype, {rows, d2}, TensorRole::kInput}};
    spec.bytes = static_cast<double>(rows) * static_cast<double>(d + d2) * static_cast<double>(DTypeSize(dtype));
    return spec;
  }

  ShapeAxes SmallShape() const override { return {{"rows", 5}, {"d", 1000}, {"d2", 2000}}; }
  // One element; an odd d (scalar access only); a Llama-3.1-8B row.
  std::vector<ShapeAxes> CheckShapes() const override {
    return {SmallShape(),
            {{"rows", 1}, {"d", 1}, {"d2", 2}},
            {{"rows", 3}, {"d", 4097}, {"d2", 8194}},
            {{"rows", 2}, {"d", 14336}, {"d2", 28672}}};
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const size_t rows = static_cast<size_t>(spec.tensors[0].shape[0]);
    const size_t d = static_cast<size_t>(spec.tensors[0].shape[1]);
    std::vector<double> out(rows * d);
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < d; ++c)
        out[r * d + c] = ActOf(act_, t[1].Get(r * 2 * d + c)) * t[1].Get(r * 2 * d + d + c);
    (*expected)[0] = std::move(out);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    if (backend == "kiln") {
      const Act act = act_;
      return BackendFn([act](const TensorSet& t, CUstream stream) {
        switch (act) {
          case Act::kSilu: return ops::silu_and_mul(t[0], t[1], stream);
          case Act::kGelu: return ops::gelu_and_mul(t[0], t[1], stream);
          case Act::kGeluTanh: return ops::gelu_tanh_and_mul(t[0], t[1], stream);
        }
        return Status(StatusCode::kInternal, "unknown activation");
      });
    }
    if (backend == "reference") {
      const int which = static_cast<int>(act_);
      KILN_ASSIGN_OR_RETURN(
          auto kernel, LoadReferenceKernel("kiln_bench_ref_act" + std::to_string(which),
                                           "#define KILN_REF_ACT " + std::to_string(which) + "\n" + kReferenceSource,
                                           "kiln_bench_ref_act_and_mul", dtype));
      const long long rows = AxisValue(shape, "rows"), d = AxisValue(shape, "d");
      return BackendFn([k = kernel, rows, d](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 256;
        const long long blocks = (rows * d + 255) / 256;
        config.grid.x = static_cast<unsigned>(blocks < (1LL << 20) ? blocks : (1LL << 20));
        config.stream = stream;
        return k(config, t[0].data, t[1].data, rows, d);
      });
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }

 private:
  Act act_;
};

class SiluAndMulRoutine : public ActAndMulRoutine {
 public:
  SiluAndMulRoutine() : ActAndMulRoutine(Act::kSilu) {}
};
class GeluAndMulRoutine : public ActAndMulRoutine {
 public:
  GeluAndMulRoutine() : ActAndMulRoutine(Act::kGelu) {}
};
class GeluTanhAndMulRoutine : public ActAndMulRoutine {
 public:
  GeluTanhAndMulRoutine() : ActAndMulRoutine(Act::kGeluTanh) {}
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(SiluAndMulRoutine);
KILN_BENCH_REGISTER_ROUTINE(GeluAndMulRoutine);
KILN_BENCH_REGISTER_ROUTINE(GeluTanhAndMulRoutine);

}  // namespace kiln::bench
