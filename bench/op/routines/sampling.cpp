// Routines "top_k_sampling", "top_p_sampling", "top_k_top_p_sampling", "min_p_sampling" and
// "argmax" (kiln/ops/sampling.h): one token per row of probs [batch, vocab] fp32.
//
// Inputs as bench/sampling/torch_baseline.py makes them: each row softmax(3 z), z standard
// normal (computed in double, rounded to fp32), so the mass sits on a few thousand tokens as
// an LLM's does; per-request parameters as tensors (the definitions' inputs), every row with
// the definitions' defaults: top_k 50, top_p 0.9, min_p 0.1. Draws use seed 0x5EED, offset 0.
//
// Refcheck: a draw is random, so the samplers' outputs are checked by what they may be
// (bench/op/sampling_check.h): each token inside its row's allowed set, computed in float64
// on the CPU from the same probabilities, and a second call with the same seed reproducing
// every token. argmax is exact: element-wise against the reference (ties: the lowest index).
//
// backends: kiln (the op), reference (one block per row: thresholds by a binary search over
// the bits of the values, double sums, then a draw by a prefix walk; argmax by a block
// reduction).
#include <cmath>
#include <memory>

#include "bench/op/host_parallel.h"
#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "bench/op/sampling_check.h"
#include "client/core/api/invalid_argument.h"
#include "kiln/ops/sampling.h"

namespace kiln::bench {
namespace {

enum class Sampler { kTopK, kTopP, kTopKTopP, kMinP, kArgmax };

constexpr int64_t kTopKValue = 50;
constexpr double kTopPValue = 0.9;
constexpr double kMinPValue = 0.1;
constexpr uint64_t kSeed = 0x5EED;
constexpr int64_t kMaxVocab = 1048575;

constexpr const char* kReferenceSource = R"(
#define THREADS 256

__device__ __forceinline__ float Clean(float x) { return x > 0.f ? x : 0.f; }  // NaN -> 0
__device__ __forceinline__ long long LMin(long long a, long long b) { return a < b ? a : b; }

__device__ double BlockSum(double v, double* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const double r = buf[0];
  __syncthreads();
  return r;
}

// Tokens with a cleaned value >= t, and the mass of those > 0 and >= t / > t.
__device__ double CountAtLeast(const float* row, long long vocab, float t, double* buf) {
  double n = 0;
  for (long long i = threadIdx.x; i < vocab; i += THREADS) n += Clean(row[i]) >= t ? 1.0 : 0.0;
  return BlockSum(n, buf);
}
__device__ double MassAtLeast(const float* row, long long vocab, float t, double* buf) {
  double m = 0;
  for (long long i = threadIdx.x; i < vocab; i += THREADS) {
    const float v = Clean(row[i]);
    if (v > 0.f && v >= t) m += v;
  }
  return BlockSum(m, buf);
}
__device__ double MassAbove(const float* row, long long vocab, float t, double* buf) {
  double m = 0;
  for (long long i = threadIdx.x; i < vocab; i += THREADS) {
    const float v = Clean(row[i]);
    if (v > t) m += v;
  }
  return BlockSum(m, buf);
}

// Non-negative floats order as their bits: thresholds are binary searches over the bits.
// The k-th largest value: the largest t with at least k values >= t.
__device__ float KthLargest(const float* row, long long vocab, long long k, double* buf) {
  unsigned lo = 0u, hi = 0x7F800001u;  // every value is >= +0; none is beyond +inf
  while (hi - lo > 1u) {
    const unsigned mid = lo + (hi - lo) / 2u;
    if (CountAtLeast(row, vocab, __uint_as_float(mid), buf) >= (double)k) lo = mid; else hi = mid;
  }
  return __uint_as_float(lo);
}

// The smallest t with (sum of the values > t) < limit: tokens >= t are the top-p set.
__device__ float TopPThreshold(const float* row, long long vocab, double limit, double* buf) {
  if (MassAbove(row, vocab, 0.f, buf) < limit) return 0.f;
  unsigned lo = 0u, hi = 0x7F800000u;  // above +0: >= limit; above +inf: 0 < limit
  while (hi - lo > 1u) {
    const unsigned mid = lo + (hi - lo) / 2u;
    if (MassAbove(row, vocab, __uint_as_float(mid), buf) < limit) hi = mid; else lo = mid;
  }
  return __uint_as_float(hi);
}

__device__ double Uniform(unsigned long long seed, long long row) {
  unsigned long long x = seed ^ ((unsigned long long)row * 0x9E3779B97F4A7C15ull);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return (double)(x >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
}

// rule: 0 top_k, 1 top_p, 2 top_k_top_p, 3 min_p. One block of THREADS per row.
extern "C" __global__ void __launch_bounds__(THREADS) kiln_bench_ref_sample(
    int* samples, const float* probs, const int* top_k, const float* top_p, const float* min_p, long long vocab,
    int rule, unsigned long long seed) {
  __shared__ double buf[THREADS];
  const long long b = blockIdx.x;
  const float* row = probs + b * vocab;
  const double total = MassAtLeast(row, vocab, 0.f, buf);
  if (!(total > 0)) {  // no positive value: token 0
    if (threadIdx.x == 0) samples[b] = 0;
    return;
  }
  float largest = 0.f;
  for (long long i = threadIdx.x; i < vocab; i += THREADS) largest = fmaxf(largest, Clean(row[i]));
  buf[threadIdx.x] = largest;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) buf[threadIdx.x] = fmax(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  largest = (float)buf[0];
  __syncthreads();

  float t = 0.f;  // allowed: value > 0 and >= t
  double mass_k = total;
  if (rule == 0 || rule == 2) {
    const long long k = top_k[b];
    if (k > 0 && k < vocab) {
      t = KthLargest(row, vocab, k, buf);
      mass_k = MassAtLeast(row, vocab, t, buf);
    }
  }
  if (rule == 1 || rule == 2) {
    const float p = top_p[b];
    if (!(p > 0.f)) t = largest;  // p <= 0 or NaN: the largest value only
    else if (p < 1.f) t = fmaxf(t, TopPThreshold(row, vocab, (double)p * mass_k, buf));
  }
  if (rule == 3) {
    float m = min_p[b];
    m = m != m ? 0.f : fminf(fmaxf(m, 0.f), 1.f);
    t = (float)((double)m * (double)largest);
  }

  // The draw: u uniform in [0, allowed mass), the first token where the running sum of the
  // allowed values exceeds u. Each thread sums a contiguous chunk; thread 0 walks the chunks.
  const double mass = MassAtLeast(row, vocab, t, buf);
  const double u = Uniform(seed, b) * mass;
  const long long chunk = (vocab + THREADS - 1) / THREADS;
  const long long begin = LMin(vocab, (long long)threadIdx.x * chunk), end = LMin(vocab, begin + chunk);
  double part = 0;
  for (long long i = begin; i < end; ++i) {
    const float v = Clean(row[i]);
    if (v > 0.f && v >= t) part += v;
  }
  buf[threadIdx.x] = part;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double acc = 0;
  long long token = -1;
  for (int c = 0; c < THREADS && token < 0; ++c) {
    if (acc + buf[c] <= u) {
      acc += buf[c];
      continue;
    }
    for (long long i = c * chunk; i < LMin(vocab, (c + 1) * chunk); ++i) {
      const float v = Clean(row[i]);
      if (!(v > 0.f && v >= t)) continue;
      acc += v;
      if (acc > u) {
        token = i;
        break;
      }
    }
  }
  for (long long i = vocab - 1; token < 0 && i >= 0; --i) {  // rounding left u past the end
    const float v = Clean(row[i]);
    if (v > 0.f && v >= t) token = i;
  }
  samples[b] = (int)token;
}

// The first index of the largest value; NaN counts as largest (torch.argmax).
__device__ bool Better(float a, long long ia, float b, long long ib) {
  if (ib < 0) return ia >= 0;
  if (ia < 0) return false;
  const bool na = a != a, nb = b != b;
  if (na || nb) return na && (!nb || ia < ib);
  if (a != b) return a > b;
  return ia < ib;
}

extern "C" __global__ void __launch_bounds__(THREADS) kiln_bench_ref_argmax(int* samples, const float* probs,
                                                                           long long vocab) {
  __shared__ float value[THREADS];
  __shared__ long long index[THREADS];
  const float* row = probs + blockIdx.x * vocab;
  float best = 0.f;
  long long at = -1;
  for (long long i = threadIdx.x; i < vocab; i += THREADS)
    if (Better(row[i], i, best, at)) {
      best = row[i];
      at = i;
    }
  value[threadIdx.x] = best;
  index[threadIdx.x] = at;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s /= 2) {
    if (threadIdx.x < s && Better(value[threadIdx.x + s], index[threadIdx.x + s], value[threadIdx.x], index[threadIdx.x])) {
      value[threadIdx.x] = value[threadIdx.x + s];
      index[threadIdx.x] = index[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) samples[blockIdx.x] = (int)index[0];
}
)";

const char* SamplerName(Sampler s) {
  switch (s) {
    case Sampler::kTopK: return "top_k_sampling";
    case Sampler::kTopP: return "top_p_sampling";
    case Sampler::kTopKTopP: return "top_k_top_p_sampling";
    case Sampler::kMinP: return "min_p_sampling";
    case Sampler::kArgmax: return "argmax";
  }
  return "?";
}

SamplingRule RuleOf(Sampler s) {
  switch (s) {
    case Sampler::kTopP: return SamplingRule::kTopP;
    case Sampler::kTopKTopP: return SamplingRule::kTopKTopP;
    case Sampler::kMinP: return SamplingRule::kMinP;
    default: return SamplingRule::kTopK;
  }
}

// The per-request parameter tensors of a sampler, in the API's order after samples and probs.
std::vector<std::string> ParamNames(Sampler s) {
  switch (s) {
    case Sampler::kTopK: return {"top_k"};
    case Sampler::kTopP: return {"top_p"};
    case Sampler::kTopKTopP: return {"top_k", "top_p"};
    case Sampler::kMinP: return {"min_p"};
    case Sampler::kArgmax: return {};
  }
  return {};
}

class SamplingRoutine : public Routine {
 public:
  explicit SamplingRoutine(Sampler sampler) : sampler_(sampler) {}

  std::string_view name() const override { return SamplerName(sampler_); }
  std::string_view description() const override {
    switch (sampler_) {
      case Sampler::kTopK:
        return "one token per row from the top-k set, k = 50 per request (kiln::ops::top_k_sampling)";
      case Sampler::kTopP:
        return "one token per row from the top-p set, p = 0.9 per request (kiln::ops::top_p_sampling)";
      case Sampler::kTopKTopP:
        return "top-k (50), then top-p (0.9) over the top-k set; one token per row (kiln::ops::top_k_top_p_sampling)";
      case Sampler::kMinP: return "one token per row from the values >= 0.1 * row max (kiln::ops::min_p_sampling)";
      case Sampler::kArgmax: return "the first index of each row's largest value (kiln::ops::argmax)";
    }
    return "";
  }
  std::vector<std::string> axes() const override { return {"batch", "vocab"}; }
  std::vector<DType> dtypes() const override { return {DType::kFloat32}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", sampler_ == Sampler::kArgmax
                         ? "the op through kiln::ops"
                         : "the op through kiln::ops (per-request parameter tensors, seed 0x5EED)"},
            {"reference", sampler_ == Sampler::kArgmax
                              ? "one block per row, a block reduction (the refcheck baseline)"
                              : "one block per row: thresholds by binary search over the values' bits, double "
                                "sums, a prefix-walk draw (checked like kiln: by membership)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t batch = AxisValue(shape, "batch"), vocab = AxisValue(shape, "vocab");
    if (vocab > kMaxVocab)
      return client::InvalidArgument(std::string(name()) + ": vocab=" + std::to_string(vocab) + " is outside 1.." +
                                     std::to_string(kMaxVocab));
    CaseSpec spec;
    spec.tensors = {{"samples", DType::kInt32, {batch}, TensorRole::kOutput},
                    {"probs", dtype, {batch, vocab}, TensorRole::kInput}};
    for (const auto& param : ParamNames(sampler_))
      spec.tensors.push_back({param, param == "top_k" ? DType::kInt32 : DType::kFloat32, {batch}, TensorRole::kInput});
    for (size_t i = 1; i < spec.tensors.size(); ++i) spec.tensors[i].routine_fills = true;
    // probs read once (the kernels read a row twice in the common case: docs/kernels-sampling.md),
    // the parameters read, the samples written.
    spec.bytes = 4.0 * static_cast<double>(batch) * static_cast<double>(vocab + 1 + ParamNames(sampler_).size());
    return spec;
  }

  ShapeAxes SmallShape() const override { return {{"batch", 5}, {"vocab", 1000}}; }
  // A vocabulary of one; an odd one; one row of Llama 3's.
  std::vector<ShapeAxes> CheckShapes() const override {
    return {SmallShape(),
            {{"batch", 2}, {"vocab", 1}},
            {{"batch", 3}, {"vocab", 30001}},
            {{"batch", 1}, {"vocab", 128256}}};
  }

  Status FillInputs(const CaseSpec& spec, const ShapeAxes& shape, std::mt19937_64& rng,
                    std::vector<HostTensor>* t) const override {
    const size_t batch = static_cast<size_t>(spec.tensors[1].shape[0]);
    const size_t vocab = static_cast<size_t>(spec.tensors[1].shape[1]);
    std::vector<uint64_t> seeds(batch);
    for (auto& s : seeds) s = rng();
    float* probs = reinterpret_cast<float*>((*t)[1].bytes.data());
    ForEachChunk(batch, 1, [&](size_t b, size_t, size_t) {
      std::mt19937_64 gen(seeds[b]);
      std::normal_distribution<double> normal;
      std::vector<double> logits(vocab);
      double m = -HUGE_VAL, sum = 0;
      for (double& x : logits) m = std::max(m, x = 3.0 * normal(gen));
      for (double& x : logits) sum += (x = std::exp(x - m));
      for (size_t i = 0; i < vocab; ++i) probs[b * vocab + i] = static_cast<float>(logits[i] / sum);
    });
    for (size_t i = 2; i < spec.tensors.size(); ++i) {
      const std::string& param = spec.tensors[i].name;
      const double value = param == "top_k"   ? static_cast<double>(kTopKValue)
                           : param == "top_p" ? kTopPValue
                                              : kMinPValue;
      for (size_t b = 0; b < batch; ++b) (*t)[i].Set(b, value);
    }
    return OkStatus();
  }

  // argmax only: the first index of the row's largest value, NaN largest.
  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    if (sampler_ != Sampler::kArgmax) return Routine::CpuReference(spec, t, expected);
    const size_t batch = static_cast<size_t>(spec.tensors[1].shape[0]);
    const size_t vocab = static_cast<size_t>(spec.tensors[1].shape[1]);
    std::vector<double> out(batch);
    for (size_t b = 0; b < batch; ++b) {
      size_t best = 0;
      for (size_t i = 1; i < vocab; ++i) {
        const double x = t[1].Get(b * vocab + i), y = t[1].Get(b * vocab + best);
        if (std::isnan(y)) break;
        if (std::isnan(x) || x > y) best = i;
      }
      out[b] = static_cast<double>(best);
    }
    (*expected)[0] = std::move(out);
    return OkStatus();
  }

  bool ChecksDraws() const override { return sampler_ != Sampler::kArgmax; }

  StatusOr<DrawValidity> DrawCheck(const CaseSpec& spec, const std::vector<HostTensor>& inputs) const override {
    if (!ChecksDraws()) return Routine::DrawCheck(spec, inputs);
    const size_t batch = static_cast<size_t>(spec.tensors[1].shape[0]);
    const int64_t vocab = spec.tensors[1].shape[1];
    std::vector<SamplingParams> params(batch);
    for (size_t i = 2; i < spec.tensors.size(); ++i)
      for (size_t b = 0; b < batch; ++b) {
        const double v = inputs[i].Get(b);
        if (spec.tensors[i].name == "top_k") params[b].top_k = static_cast<int64_t>(v);
        if (spec.tensors[i].name == "top_p") params[b].top_p = v;
        if (spec.tensors[i].name == "min_p") params[b].min_p = v;
      }
    auto probs = std::make_shared<const HostTensor>(inputs[1]);
    auto sets = std::make_shared<const std::vector<AllowedSet>>(AllowedSets(RuleOf(sampler_), *probs, vocab, params));
    DrawValidity v;
    v.what = DescribeAllowedSets(*sets);
    v.check = [probs, sets, vocab](const std::vector<HostTensor>& outputs) {
      return CheckSamples(outputs[0], *probs, vocab, *sets);
    };
    return v;
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    const Sampler sampler = sampler_;
    if (backend == "kiln") {
      return BackendFn([sampler](const TensorSet& t, CUstream stream) -> Status {
        const ops::SamplingSeed seed{kSeed, 0};
        switch (sampler) {
          case Sampler::kTopK: return ops::top_k_sampling(t[0], t[1], ops::PerRequestInt{&t[2], 0}, seed, stream);
          case Sampler::kTopP: return ops::top_p_sampling(t[0], t[1], ops::PerRequestFloat{&t[2], 0}, seed, stream);
          case Sampler::kTopKTopP:
            return ops::top_k_top_p_sampling(t[0], t[1], ops::PerRequestInt{&t[2], 0}, ops::PerRequestFloat{&t[3], 0},
                                             seed, stream);
          case Sampler::kMinP: return ops::min_p_sampling(t[0], t[1], ops::PerRequestFloat{&t[2], 0}, seed, stream);
          case Sampler::kArgmax: return ops::argmax(t[0], t[1], stream);
        }
        return Status(StatusCode::kInternal, "unknown sampler");
      });
    }
    if (backend != "reference")
      return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
    const char* entry = sampler == Sampler::kArgmax ? "kiln_bench_ref_argmax" : "kiln_bench_ref_sample";
    KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_sampling", kReferenceSource, entry, dtype));
    const long long batch = AxisValue(shape, "batch"), vocab = AxisValue(shape, "vocab");
    if (batch > 0x7FFFFFFF) return client::InvalidArgument(std::string(name()) + ": batch too large");
    return BackendFn([k = kernel, sampler, batch, vocab](const TensorSet& t, CUstream stream) -> Status {
      LaunchConfig config;
      config.grid.x = static_cast<unsigned>(batch);
      config.block.x = 256;
      config.stream = stream;
      if (sampler == Sampler::kArgmax) return k(config, t[0].data, t[1].data, vocab);
      // The parameter tensors by name (unused ones null), the rule as the kernel numbers it.
      const void* top_k = nullptr;
      const void* top_p = nullptr;
      const void* min_p = nullptr;
      int rule = 0;
      switch (sampler) {
        case Sampler::kTopK:
          top_k = t[2].data;
          rule = 0;
          break;
        case Sampler::kTopP:
          top_p = t[2].data;
          rule = 1;
          break;
        case Sampler::kTopKTopP:
          top_k = t[2].data;
          top_p = t[3].data;
          rule = 2;
          break;
        case Sampler::kMinP:
          min_p = t[2].data;
          rule = 3;
          break;
        case Sampler::kArgmax: break;
      }
      return k(config, t[0].data, t[1].data, top_k, top_p, min_p, vocab, rule, static_cast<unsigned long long>(kSeed));
    });
  }

 private:
  Sampler sampler_;
};

class TopKSamplingRoutine : public SamplingRoutine {
 public:
  TopKSamplingRoutine() : SamplingRoutine(Sampler::kTopK) {}
};
class TopPSamplingRoutine : public SamplingRoutine {
 public:
  TopPSamplingRoutine() : SamplingRoutine(Sampler::kTopP) {}
};
class TopKTopPSamplingRoutine : public SamplingRoutine {
 public:
  TopKTopPSamplingRoutine() : SamplingRoutine(Sampler::kTopKTopP) {}
};
class MinPSamplingRoutine : public SamplingRoutine {
 public:
  MinPSamplingRoutine() : SamplingRoutine(Sampler::kMinP) {}
};
class ArgmaxRoutine : public SamplingRoutine {
 public:
  ArgmaxRoutine() : SamplingRoutine(Sampler::kArgmax) {}
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(TopKSamplingRoutine);
KILN_BENCH_REGISTER_ROUTINE(TopPSamplingRoutine);
KILN_BENCH_REGISTER_ROUTINE(TopKTopPSamplingRoutine);
KILN_BENCH_REGISTER_ROUTINE(MinPSamplingRoutine);
KILN_BENCH_REGISTER_ROUTINE(ArgmaxRoutine);

}  // namespace kiln::bench
