// Routines "apply_rope" and "apply_rope_with_cos_sin_cache" (kiln/ops/rope.h): NeoX rotation,
// in place on q [tokens, q_heads, head_dim] and k [tokens, k_heads, head_dim].
//
// apply_rope runs as Llama-3.1-8B does: theta 500000, Llama-3.1 frequency scaling (factor 8,
// low 1, high 4, original 8192), positions drawn in [0, 131072). The cos/sin-cache variant reads
// a [max_position, rotary_dim] fp32 table (random values: the kernel only multiplies by them).
//
// backends: kiln (the public op), reference (one thread per rotated pair; apply_rope's angles,
// frequencies and cos/sin in double).
#include <cmath>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "client/core/api/invalid_argument.h"
#include "kiln/ops/rope.h"

namespace kiln::bench {
namespace {

constexpr double kTheta = 500000.0;
constexpr ops::Llama31RopeScaling kLlama31 = {8.0, 1.0, 4.0, 8192};
constexpr int64_t kMaxPosition = 131072;

constexpr const char* kReferenceSource = R"(
__device__ T* Head(T* q, T* k, long long tok, long long h, long long q_heads, long long k_heads, long long head_dim) {
  return h < q_heads ? q + (tok * q_heads + h) * head_dim : k + (tok * k_heads + (h - q_heads)) * head_dim;
}

// One thread per (token, head, pair i < head_dim / 2); pairs (i, i + head_dim / 2).
extern "C" __global__ void kiln_bench_ref_rope(T* q, T* k, const long long* positions, long long tokens,
                                               long long q_heads, long long k_heads, long long head_dim,
                                               double theta, double factor, double low, double high,
                                               double original) {
  const long long half = head_dim / 2, heads = q_heads + k_heads, n = tokens * heads * half;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += (long long)gridDim.x * blockDim.x) {
    const long long i = idx % half, h = (idx / half) % heads, tok = idx / (half * heads);
    double inv = pow(theta, -2.0 * (double)i / (double)head_dim);
    if (factor > 0) {
      const double wavelen = 2.0 * 3.14159265358979323846 / inv;
      if (wavelen > original / low) {
        inv = inv / factor;
      } else if (wavelen >= original / high) {
        const double s = (original / wavelen - low) / (high - low);
        inv = (1.0 - s) * inv / factor + s * inv;
      }
    }
    const double a = (double)positions[tok] * inv;
    const float c = (float)cos(a), s = (float)sin(a);
    T* x = Head(q, k, tok, h, q_heads, k_heads, head_dim);
    const float x1 = ToF(x[i]), x2 = ToF(x[i + half]);
    x[i] = FromF<T>(x1 * c - x2 * s);
    x[i + half] = FromF<T>(x2 * c + x1 * s);
  }
}

// The same rotation with cos/sin from cache [max_position, rotary_dim] (cos, then sin).
extern "C" __global__ void kiln_bench_ref_rope_cache(T* q, T* k, const long long* positions, const float* cache,
                                                     long long tokens, long long q_heads, long long k_heads,
                                                     long long head_dim, long long rotary_dim, long long max_position) {
  const long long half = rotary_dim / 2, heads = q_heads + k_heads, n = tokens * heads * half;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += (long long)gridDim.x * blockDim.x) {
    const long long i = idx % half, h = (idx / half) % heads, tok = idx / (half * heads);
    const long long p = positions[tok];
    if (p < 0 || p >= max_position) continue;
    const float c = cache[p * rotary_dim + i], s = cache[p * rotary_dim + half + i];
    T* x = Head(q, k, tok, h, q_heads, k_heads, head_dim);
    const float x1 = ToF(x[i]), x2 = ToF(x[i + half]);
    x[i] = FromF<T>(x1 * c - x2 * s);
    x[i + half] = FromF<T>(x2 * c + x1 * s);
  }
}
)";

double InvFreq(int64_t i, int64_t head_dim) {
  double inv = std::pow(kTheta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  const double wavelen = 2.0 * M_PI / inv;
  const double original = static_cast<double>(kLlama31.original_max_position);
  if (wavelen > original / kLlama31.low_freq_factor) return inv / kLlama31.factor;
  if (wavelen >= original / kLlama31.high_freq_factor) {
    const double s = (original / wavelen - kLlama31.low_freq_factor) /
                     (kLlama31.high_freq_factor - kLlama31.low_freq_factor);
    return (1.0 - s) * inv / kLlama31.factor + s * inv;
  }
  return inv;
}

LaunchConfig GridFor(long long n, CUstream stream) {
  LaunchConfig config;
  config.block.x = 256;
  const long long blocks = (n + 255) / 256;
  config.grid.x = static_cast<unsigned>(blocks < (1LL << 20) ? blocks : (1LL << 20));
  config.stream = stream;
  return config;
}

class RopeRoutine : public Routine {
 public:
  explicit RopeRoutine(bool cached) : cached_(cached) {}

  std::string_view name() const override { return cached_ ? "apply_rope_with_cos_sin_cache" : "apply_rope"; }
  std::string_view description() const override {
    return cached_ ? "NeoX rotation of q and k in place, cos/sin from a [max_position, rotary_dim] fp32 table "
                     "(kiln::ops::apply_rope_with_cos_sin_cache)"
                   : "NeoX rotation of q and k in place, theta 500000 with Llama-3.1 scaling (kiln::ops::apply_rope)";
  }
  std::vector<std::string> axes() const override {
    if (cached_) return {"tokens", "q_heads", "k_heads", "head_dim", "max_position", "rotary_dim"};
    return {"tokens", "q_heads", "k_heads", "head_dim"};
  }
  std::vector<DType> dtypes() const override { return {DType::kFloat16, DType::kBFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", "the op through kiln::ops"},
            {"reference", cached_
                              ? "one thread per rotated pair, fp32 math (the refcheck baseline)"
                              : "one thread per rotated pair, angles and cos/sin in double (the refcheck baseline)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t tokens = AxisValue(shape, "tokens"), qh = AxisValue(shape, "q_heads");
    const int64_t kh = AxisValue(shape, "k_heads"), hd = AxisValue(shape, "head_dim");
    const int64_t rotary = cached_ ? AxisValue(shape, "rotary_dim") : hd;
    if (rotary % 2 != 0 || rotary > hd)
      return client::InvalidArgument(std::string(name()) + ": the rotary dim " + std::to_string(rotary) +
                                     " must be even and at most head_dim=" + std::to_string(hd));
    const int64_t max_position = cached_ ? AxisValue(shape, "max_position") : kMaxPosition;
    CaseSpec spec;
    spec.tensors = {{"q", dtype, {tokens, qh, hd}, TensorRole::kInOut},
                    {"k", dtype, {tokens, kh, hd}, TensorRole::kInOut},
                    {"positions", DType::kInt64, {tokens}, TensorRole::kInput, 0, static_cast<double>(max_position)}};
    if (cached_)
      spec.tensors.push_back({"cos_sin_cache", DType::kFloat32, {max_position, rotary}, TensorRole::kInput, -1, 1});
    const double es = static_cast<double>(DTypeSize(dtype));
    // Rotated parts read and written, positions read, and one cache row per token.
    spec.bytes = 2.0 * static_cast<double>(tokens) * static_cast<double>(qh + kh) * static_cast<double>(rotary) * es +
                 8.0 * static_cast<double>(tokens) + (cached_ ? 4.0 * static_cast<double>(tokens * rotary) : 0.0);
    return spec;
  }

  ShapeAxes SmallShape() const override {
    if (cached_)
      return {{"tokens", 5},    {"q_heads", 3},        {"k_heads", 2},
              {"head_dim", 64}, {"max_position", 100}, {"rotary_dim", 32}};
    return {{"tokens", 5}, {"q_heads", 3}, {"k_heads", 2}, {"head_dim", 64}};
  }

  // One token and head; the largest head_dim; a rotary part that is all of head_dim.
  std::vector<ShapeAxes> CheckShapes() const override {
    if (cached_)
      return {
          SmallShape(),
          {{"tokens", 1}, {"q_heads", 1}, {"k_heads", 1}, {"head_dim", 64}, {"max_position", 1}, {"rotary_dim", 64}},
          {{"tokens", 7},
           {"q_heads", 5},
           {"k_heads", 1},
           {"head_dim", 256},
           {"max_position", 37},
           {"rotary_dim", 128}}};
    return {SmallShape(),
            {{"tokens", 1}, {"q_heads", 1}, {"k_heads", 1}, {"head_dim", 64}},
            {{"tokens", 7}, {"q_heads", 5}, {"k_heads", 1}, {"head_dim", 256}}};
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const int64_t tokens = spec.tensors[0].shape[0], hd = spec.tensors[0].shape[2];
    const int64_t rotary = cached_ ? spec.tensors[3].shape[1] : hd, half = rotary / 2;
    for (size_t which : {size_t{0}, size_t{1}}) {
      const int64_t heads = spec.tensors[which].shape[1];
      std::vector<double> out(t[which].size());
      for (size_t e = 0; e < out.size(); ++e) out[e] = t[which].Get(e);  // the untouched tail
      for (int64_t tok = 0; tok < tokens; ++tok) {
        const int64_t p = static_cast<int64_t>(t[2].Get(static_cast<size_t>(tok)));
        for (int64_t h = 0; h < heads; ++h) {
          const size_t base = static_cast<size_t>((tok * heads + h) * hd);
          for (int64_t i = 0; i < half; ++i) {
            double c, s;
            if (cached_) {
              c = t[3].Get(static_cast<size_t>(p * rotary + i));
              s = t[3].Get(static_cast<size_t>(p * rotary + half + i));
            } else {
              const double a = static_cast<double>(p) * InvFreq(i, hd);
              c = std::cos(a);
              s = std::sin(a);
            }
            const double x1 = t[which].Get(base + i), x2 = t[which].Get(base + i + half);
            out[base + i] = x1 * c - x2 * s;
            out[base + i + half] = x2 * c + x1 * s;
          }
        }
      }
      (*expected)[which] = std::move(out);
    }
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    const long long tokens = AxisValue(shape, "tokens"), qh = AxisValue(shape, "q_heads");
    const long long kh = AxisValue(shape, "k_heads"), hd = AxisValue(shape, "head_dim");
    if (backend == "kiln") {
      if (cached_)
        return BackendFn([](const TensorSet& t, CUstream stream) {
          return ops::apply_rope_with_cos_sin_cache(t[0], t[1], t[2], t[3], /*interleaved=*/false, stream);
        });
      return BackendFn([](const TensorSet& t, CUstream stream) {
        ops::RopeOptions options;
        options.theta = kTheta;
        options.llama31 = kLlama31;
        return ops::apply_rope(t[0], t[1], t[2], options, stream);
      });
    }
    if (backend != "reference")
      return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
    const char* entry = cached_ ? "kiln_bench_ref_rope_cache" : "kiln_bench_ref_rope";
    KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_rope", kReferenceSource, entry, dtype));
    if (cached_) {
      const long long rotary = AxisValue(shape, "rotary_dim"), max_position = AxisValue(shape, "max_position");
      return BackendFn([k = kernel, tokens, qh, kh, hd, rotary, max_position](const TensorSet& t, CUstream stream) {
        return k(GridFor(tokens * (qh + kh) * (rotary / 2), stream), t[0].data, t[1].data, t[2].data, t[3].data, tokens,
                 qh, kh, hd, rotary, max_position);
      });
    }
    return BackendFn([k = kernel, tokens, qh, kh, hd](const TensorSet& t, CUstream stream) {
      return k(GridFor(tokens * (qh + kh) * (hd / 2), stream), t[0].data, t[1].data, t[2].data, tokens, qh, kh, hd,
               kTheta, kLlama31.factor, kLlama31.low_freq_factor, kLlama31.high_freq_factor,
               static_cast<double>(kLlama31.original_max_position));
    });
  }

 private:
  bool cached_;
};

class ApplyRopeRoutine : public RopeRoutine {
 public:
  ApplyRopeRoutine() : RopeRoutine(false) {}
};
class ApplyRopeWithCosSinCacheRoutine : public RopeRoutine {
 public:
  ApplyRopeWithCosSinCacheRoutine() : RopeRoutine(true) {}
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(ApplyRopeRoutine);
KILN_BENCH_REGISTER_ROUTINE(ApplyRopeWithCosSinCacheRoutine);

}  // namespace kiln::bench
