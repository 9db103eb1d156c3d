// Routines "rmsnorm" and "fused_add_rmsnorm" (kiln::ops::rms_norm, fused_add_rms_norm).
//
// backends: kiln (the public op), reference (one thread per row, fp32: obviously correct),
// kiln_vec1/2/4 (the op with its vector width forced through the client's internal plan: a
// diagnostic tactic control, valid where the width divides hidden).
#include <cmath>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "client/core/api/invalid_argument.h"
#include "client/ops/norm/norm_ops.h"
#include "client/ops/norm/norm_plan.h"
#include "kiln/norm/norm_contract.h"
#include "kiln/ops/norm.h"

namespace kiln::bench {
namespace {

constexpr double kEps = 1e-6;

constexpr const char* kReferenceSource = R"(
// One thread per row, fp32 math; out = T(x * rsqrt(mean(x^2) + eps) * w).
extern "C" __global__ void kiln_bench_ref_rmsnorm(T* out, const T* in, const T* w, long long rows,
                                                  long long hidden, float eps) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* x = in + row * hidden;
  float sum = 0.f;
  for (long long i = 0; i < hidden; ++i) sum += ToF(x[i]) * ToF(x[i]);
  const float inv = rsqrtf(sum / (float)hidden + eps);
  for (long long i = 0; i < hidden; ++i) out[row * hidden + i] = FromF<T>(ToF(x[i]) * inv * ToF(w[i]));
}

// residual = T(input + residual); input = T(residual * rsqrt(mean(residual^2) + eps) * w).
extern "C" __global__ void kiln_bench_ref_fused_add_rmsnorm(T* input, T* residual, const T* w, long long rows,
                                                            long long hidden, float eps) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  T* a = input + row * hidden;
  T* r = residual + row * hidden;
  float sum = 0.f;
  for (long long i = 0; i < hidden; ++i) {
    const T x = FromF<T>(ToF(a[i]) + ToF(r[i]));
    r[i] = x;
    sum += ToF(x) * ToF(x);
  }
  const float inv = rsqrtf(sum / (float)hidden + eps);
  for (long long i = 0; i < hidden; ++i) a[i] = FromF<T>(ToF(r[i]) * inv * ToF(w[i]));
}
)";

class NormRoutine : public Routine {
 public:
  explicit NormRoutine(bool fused) : fused_(fused) {}

  std::string_view name() const override { return fused_ ? "fused_add_rmsnorm" : "rmsnorm"; }
  std::string_view description() const override {
    return fused_ ? "residual = input + residual; input = rms_norm(residual) * weight (kiln::ops::fused_add_rms_norm)"
                  : "out = rms_norm(input) * weight (kiln::ops::rms_norm)";
  }
  std::vector<std::string> axes() const override { return {"rows", "hidden"}; }
  std::vector<DType> dtypes() const override { return {DType::kFloat32, DType::kFloat16, DType::kBFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", "the op through kiln::ops (vector width chosen from sizes and alignment)"},
            {"reference", "one thread per row, fp32 math (the refcheck baseline)"},
            {"kiln_vec1", "kiln with vec=1 forced through the internal plan (diagnostic)"},
            {"kiln_vec2", "kiln with vec=2 forced (diagnostic; hidden must be even)"},
            {"kiln_vec4", "kiln with vec=4 forced (diagnostic; 4 must divide hidden)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t rows = AxisValue(shape, "rows"), hidden = AxisValue(shape, "hidden");
    if (hidden > norm::kMaxHidden)
      return client::InvalidArgument(std::string(name()) + ": hidden=" + std::to_string(hidden) + " is outside 1.." +
                                     std::to_string(norm::kMaxHidden));
    const double es = static_cast<double>(DTypeSize(dtype));
    const double matrix = static_cast<double>(rows) * static_cast<double>(hidden) * es;
    CaseSpec spec;
    if (fused_) {
      spec.tensors = {{"input", dtype, {rows, hidden}, TensorRole::kInOut},
                      {"residual", dtype, {rows, hidden}, TensorRole::kInOut},
                      {"weight", dtype, {hidden}, TensorRole::kInput}};
      spec.bytes = 4 * matrix + static_cast<double>(hidden) * es;  // read input, residual; write both
    } else {
      spec.tensors = {{"out", dtype, {rows, hidden}, TensorRole::kOutput},
                      {"input", dtype, {rows, hidden}, TensorRole::kInput},
                      {"weight", dtype, {hidden}, TensorRole::kInput}};
      spec.bytes = 2 * matrix + static_cast<double>(hidden) * es;  // read input, write out
    }
    return spec;
  }

  ShapeAxes SmallShape() const override { return {{"rows", 7}, {"hidden", 1000}}; }
  // One element; an odd hidden size (scalar access); the largest hidden size the op takes.
  std::vector<ShapeAxes> CheckShapes() const override {
    return {
        SmallShape(), {{"rows", 1}, {"hidden", 1}}, {{"rows", 3}, {"hidden", 4095}}, {{"rows", 2}, {"hidden", 65536}}};
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const size_t rows = static_cast<size_t>(spec.tensors[0].shape[0]);
    const size_t hidden = static_cast<size_t>(spec.tensors[0].shape[1]);
    const HostTensor& w = t[2];
    std::vector<double> out(rows * hidden), residual(rows * hidden);
    HostTensor rounded = HostTensor::Zeros(w.dtype, 1);
    for (size_t r = 0; r < rows; ++r) {
      std::vector<double> x(hidden);
      double squares = 0;
      for (size_t i = 0; i < hidden; ++i) {
        const size_t k = r * hidden + i;
        if (fused_) {
          // The sum is rounded to the dtype once, as the op stores it (and reads it back).
          rounded.Set(0, static_cast<double>(static_cast<float>(t[0].Get(k)) + static_cast<float>(t[1].Get(k))));
          x[i] = rounded.Get(0);
          residual[k] = x[i];
        } else {
          x[i] = t[1].Get(k);
        }
        squares += x[i] * x[i];
      }
      const double inv = 1.0 / std::sqrt(squares / static_cast<double>(hidden) + kEps);
      for (size_t i = 0; i < hidden; ++i) out[r * hidden + i] = x[i] * inv * w.Get(i);
    }
    (*expected)[0] = std::move(out);
    if (fused_) (*expected)[1] = std::move(residual);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    const bool fused = fused_;
    if (backend == "kiln") {
      return BackendFn([fused](const TensorSet& t, CUstream stream) {
        return fused ? ops::fused_add_rms_norm(t[0], t[1], t[2], kEps, stream)
                     : ops::rms_norm(t[0], t[1], t[2], kEps, stream);
      });
    }
    if (backend == "reference") {
      const char* entry = fused_ ? "kiln_bench_ref_fused_add_rmsnorm" : "kiln_bench_ref_rmsnorm";
      KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_norm", kReferenceSource, entry, dtype));
      const long long rows = AxisValue(shape, "rows"), hidden = AxisValue(shape, "hidden");
      return BackendFn([k = kernel, rows, hidden](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 128;
        config.grid.x = static_cast<unsigned>((rows + 127) / 128);
        config.stream = stream;
        return k(config, t[0].data, t[1].data, t[2].data, rows, hidden, static_cast<float>(kEps));
      });
    }
    for (int vec : {1, 2, 4}) {
      if (backend != "kiln_vec" + std::to_string(vec)) continue;
      const int64_t hidden = AxisValue(shape, "hidden");
      if (hidden % vec != 0)
        return client::InvalidArgument(backend + ": vec=" + std::to_string(vec) +
                                       " does not divide hidden=" + std::to_string(hidden));
      return BackendFn([fused, vec, backend](const TensorSet& t, CUstream stream) -> Status {
        KILN_ASSIGN_OR_RETURN(auto plan, fused ? client::PlanFusedAddRmsNorm(t[0], t[1], t[2], kEps,
                                                                             "kiln-bench fused_add_rmsnorm")
                                               : client::PlanRmsNorm(t[0], t[1], t[2], kEps, "kiln-bench rmsnorm"));
        if (vec > plan.vec)
          return client::InvalidArgument(backend + ": the tensors allow vec <= " + std::to_string(plan.vec) + " only");
        plan.vec = vec;
        return client::LaunchNormPlan(plan, stream);
      });
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }

 private:
  bool fused_;
};

class RmsNormRoutine : public NormRoutine {
 public:
  RmsNormRoutine() : NormRoutine(false) {}
};

class FusedAddRmsNormRoutine : public NormRoutine {
 public:
  FusedAddRmsNormRoutine() : NormRoutine(true) {}
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(RmsNormRoutine);
KILN_BENCH_REGISTER_ROUTINE(FusedAddRmsNormRoutine);

}  // namespace kiln::bench
