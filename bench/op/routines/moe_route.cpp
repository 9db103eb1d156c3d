// Routine "moe_route" (kiln::ops::moe_route): router logits [tokens, experts] -> topk_ids and
// topk_weights [tokens, top_k]. The axis `rule` picks the router of the case: 1 softmax,
// renormalized (Mixtral, Qwen3-MoE; groups = kept_groups = 1); 2 DeepSeek-V3's: sigmoid, a
// correction bias, n_group = groups, topk_group = kept_groups, renormalized, times 2.5.
//
// backends: kiln (the op), reference (one thread per token, fp64, plain scans: obviously
// correct). The ids are compared exactly (both sides rank in fp64, as the CPU reference does);
// the weights within fp32's tolerance, whatever the logits' dtype (they are computed in fp64
// from the logits as stored and rounded once).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "bench/op/reference_kernel.h"
#include "bench/op/routine.h"
#include "client/core/api/invalid_argument.h"
#include "kiln/moe/moe_contract.h"
#include "kiln/ops/moe.h"

namespace kiln::bench {
namespace {

constexpr double kDeepSeekScale = 2.5;

constexpr const char* kReferenceSource = R"(
// One thread per token, fp64, plain scans over the row; the rule of kiln/ops/moe.h.
extern "C" __global__ void kiln_bench_ref_moe_route(int* ids, float* weights, const T* logits, const float* bias,
                                                    long long tokens, int experts, int top_k, int sigmoid,
                                                    int n_group, int topk_group, int renormalize, double scale) {
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const T* x = logits + t * experts;
  double u[256], key[256];
  bool open[256];
  double m = -1.0 / 0.0, sum = 0;
  for (int e = 0; e < experts; ++e) m = fmax(m, (double)ToF(x[e]));
  for (int e = 0; e < experts; ++e) {
    u[e] = sigmoid ? 1.0 / (1.0 + exp(-(double)ToF(x[e]))) : exp((double)ToF(x[e]) - m);
    sum += u[e];
  }
  for (int e = 0; e < experts; ++e) {
    if (!sigmoid) u[e] /= sum;
    key[e] = u[e] + (bias ? (double)bias[e] : 0.0);
    if (key[e] != key[e]) key[e] = -1.0 / 0.0;
    open[e] = true;
  }
  if (n_group > 1) {
    const int size = experts / n_group;
    double score[32];
    bool kept[32];
    for (int g = 0; g < n_group; ++g) {
      int a = -1, b = -1;  // the two largest keys of the group
      for (int e = g * size; e < (g + 1) * size; ++e) {
        if (a < 0 || key[e] > key[a]) { b = a; a = e; }
        else if (b < 0 || key[e] > key[b]) { b = e; }
      }
      score[g] = b < 0 ? key[a] : key[a] + key[b];
      if (score[g] != score[g]) score[g] = -1.0 / 0.0;
      kept[g] = false;
    }
    for (int r = 0; r < topk_group; ++r) {
      int best = -1;
      for (int g = 0; g < n_group; ++g)
        if (!kept[g] && (best < 0 || score[g] > score[best])) best = g;
      kept[best] = true;
    }
    for (int e = 0; e < experts; ++e) open[e] = kept[e / size];
  }
  double w[16], total = 0;
  for (int k = 0; k < top_k; ++k) {
    int best = -1;
    for (int e = 0; e < experts; ++e)
      if (open[e] && (best < 0 || key[e] > key[best])) best = e;
    open[best] = false;
    ids[t * top_k + k] = best;
    w[k] = u[best];
    total += w[k];
  }
  for (int k = 0; k < top_k; ++k)
    weights[t * top_k + k] = (float)((renormalize ? w[k] / (total + 1e-20) : w[k]) * scale);
}
)";

struct Rule {
  bool sigmoid = false;
  bool bias = false;
  int n_group = 1;
  int topk_group = 1;
  double scale = 1.0;
};

Rule RuleOf(const ShapeAxes& shape) {
  Rule r;
  if (AxisValue(shape, "rule") == 2) {
    r.sigmoid = true;
    r.bias = true;
    r.scale = kDeepSeekScale;
  }
  r.n_group = static_cast<int>(AxisValue(shape, "groups"));
  r.topk_group = static_cast<int>(AxisValue(shape, "kept_groups"));
  return r;
}

ops::MoeRouteOptions OptionsOf(const Rule& r) {
  ops::MoeRouteOptions o;
  o.scoring = r.sigmoid ? ops::MoeScoring::kSigmoid : ops::MoeScoring::kSoftmax;
  o.renormalize = true;
  o.n_group = r.n_group;
  o.topk_group = r.topk_group;
  o.routed_scaling_factor = r.scale;
  return o;
}

class MoeRouteRoutine : public Routine {
 public:
  std::string_view name() const override { return moe::kMoeRouteOp; }
  std::string_view description() const override {
    return "router logits -> top-k expert ids and weights; rule 1 softmax (Mixtral, Qwen3), 2 DeepSeek-V3 "
           "(kiln::ops::moe_route)";
  }
  std::vector<std::string> axes() const override {
    return {"tokens", "experts", "top_k", "rule", "groups", "kept_groups"};
  }
  std::vector<DType> dtypes() const override { return {DType::kFloat32, DType::kFloat16, DType::kBFloat16}; }
  std::vector<BackendInfo> backends() const override {
    return {{"kiln", "the op through kiln::ops (one warp per token, fp64 scores)"},
            {"reference", "one thread per token, fp64, plain scans (the refcheck baseline)"}};
  }

  StatusOr<CaseSpec> Describe(const ShapeAxes& shape, DType dtype) const override {
    const int64_t tokens = AxisValue(shape, "tokens"), experts = AxisValue(shape, "experts");
    const int64_t top_k = AxisValue(shape, "top_k"), rule = AxisValue(shape, "rule");
    const int64_t groups = AxisValue(shape, "groups"), kept = AxisValue(shape, "kept_groups");
    const std::string where = std::string(name()) + ": ";
    if (experts < 1 || experts > moe::kMaxExperts)
      return client::InvalidArgument(where + "experts=" + std::to_string(experts) + " is outside 1.." +
                                     std::to_string(moe::kMaxExperts));
    if (top_k < 1 || top_k > std::min<int64_t>(experts, moe::kMaxTopK))
      return client::InvalidArgument(where + "top_k=" + std::to_string(top_k) + " is outside 1..min(experts, " +
                                     std::to_string(moe::kMaxTopK) + ")");
    if (rule != 1 && rule != 2) return client::InvalidArgument(where + "rule must be 1 or 2");
    if (groups < 1 || groups > moe::kMaxGroups || experts % groups != 0 || kept < 1 || kept > groups ||
        top_k > kept * (experts / groups) || (rule == 1 && groups != 1))
      return client::InvalidArgument(where + "groups=" + std::to_string(groups) + " kept_groups=" +
                                     std::to_string(kept) + " do not fit experts=" + std::to_string(experts) +
                                     " top_k=" + std::to_string(top_k) + " rule=" + std::to_string(rule));
    CaseSpec spec;
    spec.axes = shape;  // the rule and the groups, for CpuReference
    TensorSpec weights{"topk_weights", DType::kFloat32, {tokens, top_k}, TensorRole::kOutput};
    weights.tolerance = {1e-6, 1e-5};  // fp64 math rounded once to fp32
    spec.tensors = {{"topk_ids", DType::kInt32, {tokens, top_k}, TensorRole::kOutput},
                    weights,
                    {"logits", dtype, {tokens, experts}, TensorRole::kInput}};
    if (rule == 2) {
      TensorSpec bias{"correction_bias", DType::kFloat32, {experts}, TensorRole::kInput};
      bias.lo = -0.1;  // DeepSeek-V3's biases are small next to the sigmoid scores
      bias.hi = 0.1;
      spec.tensors.push_back(bias);
    }
    spec.bytes = static_cast<double>(tokens) * static_cast<double>(experts) * static_cast<double>(DTypeSize(dtype)) +
                 static_cast<double>(tokens) * static_cast<double>(top_k) * 8.0 +
                 (rule == 2 ? 4.0 * static_cast<double>(experts) : 0.0);
    return spec;
  }

  ShapeAxes SmallShape() const override {
    return {{"tokens", 7}, {"experts", 64}, {"top_k", 6}, {"rule", 2}, {"groups", 8}, {"kept_groups", 3}};
  }
  // One expert; partial lanes (E = 60, 8); the largest E and top_k; DeepSeek-V3's shape; groups
  // of one expert; many tokens over several blocks.
  std::vector<ShapeAxes> CheckShapes() const override {
    auto s = [](int64_t t, int64_t e, int64_t k, int64_t rule, int64_t g, int64_t kg) {
      return ShapeAxes{{"tokens", t}, {"experts", e}, {"top_k", k}, {"rule", rule}, {"groups", g}, {"kept_groups", kg}};
    };
    return {SmallShape(),          s(3, 1, 1, 1, 1, 1),   s(1, 8, 2, 1, 1, 1),   s(33, 256, 16, 1, 1, 1),
            s(9, 256, 8, 2, 8, 4), s(64, 60, 4, 2, 4, 2), s(5, 32, 4, 2, 32, 4), s(1000, 128, 8, 1, 1, 1),
            s(17, 8, 3, 2, 2, 1)};
  }

  Status CpuReference(const CaseSpec& spec, const std::vector<HostTensor>& t,
                      std::map<size_t, std::vector<double>>* expected) const override {
    const size_t tokens = static_cast<size_t>(spec.tensors[2].shape[0]);
    const size_t experts = static_cast<size_t>(spec.tensors[2].shape[1]);
    const size_t top_k = static_cast<size_t>(spec.tensors[0].shape[1]);
    const Rule rule = RuleOf(spec.axes);  // not in the tensors: the case's axes say it
    const bool has_bias = rule.bias;
    std::vector<double> ids(tokens * top_k), weights(tokens * top_k);
    const double neg_inf = -std::numeric_limits<double>::infinity();
    for (size_t r = 0; r < tokens; ++r) {
      std::vector<double> x(experts), u(experts), key(experts);
      double m = neg_inf, sum = 0;
      for (size_t e = 0; e < experts; ++e) m = std::max(m, x[e] = t[2].Get(r * experts + e));
      for (size_t e = 0; e < experts; ++e) {
        u[e] = rule.sigmoid ? 1.0 / (1.0 + std::exp(-x[e])) : std::exp(x[e] - m);
        sum += u[e];
      }
      std::vector<bool> open(experts, true);
      for (size_t e = 0; e < experts; ++e) {
        if (!rule.sigmoid) u[e] /= sum;
        key[e] = u[e] + (has_bias ? t[3].Get(e) : 0.0);
        if (std::isnan(key[e])) key[e] = neg_inf;
      }
      if (rule.n_group > 1) {
        const size_t size = experts / static_cast<size_t>(rule.n_group);
        std::vector<std::pair<double, int>> score;  // (-sum of the two largest keys, group): sorts best first
        for (int g = 0; g < rule.n_group; ++g) {
          std::vector<double> k(key.begin() + g * size, key.begin() + (g + 1) * size);
          std::sort(k.begin(), k.end(), std::greater<>());
          score.push_back({-(size >= 2 ? k[0] + k[1] : k[0]), g});
        }
        std::sort(score.begin(), score.end());
        std::vector<bool> kept(static_cast<size_t>(rule.n_group), false);
        for (int g = 0; g < rule.topk_group; ++g)
          kept[static_cast<size_t>(score[static_cast<size_t>(g)].second)] = true;
        for (size_t e = 0; e < experts; ++e) open[e] = kept[e / size];
      }
      std::vector<size_t> order;
      for (size_t e = 0; e < experts; ++e)
        if (open[e]) order.push_back(e);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] > key[b]; });
      double total = 0;
      for (size_t k = 0; k < top_k; ++k) total += u[order[k]];
      for (size_t k = 0; k < top_k; ++k) {
        ids[r * top_k + k] = static_cast<double>(order[k]);
        weights[r * top_k + k] = u[order[k]] / (total + 1e-20) * rule.scale;
      }
    }
    (*expected)[0] = std::move(ids);
    (*expected)[1] = std::move(weights);
    return OkStatus();
  }

  StatusOr<BackendFn> Prepare(const std::string& backend, const CaseSpec& spec, const ShapeAxes& shape,
                              DType dtype) const override {
    const Rule rule = RuleOf(shape);
    if (backend == "kiln") {
      const ops::MoeRouteOptions options = OptionsOf(rule);
      return BackendFn([options, bias = rule.bias](const TensorSet& t, CUstream stream) {
        return ops::moe_route(t[0], t[1], t[2], bias ? &t[3] : nullptr, options, stream);
      });
    }
    if (backend == "reference") {
      KILN_ASSIGN_OR_RETURN(auto kernel, LoadReferenceKernel("kiln_bench_ref_moe_route", kReferenceSource,
                                                             "kiln_bench_ref_moe_route", dtype));
      const long long tokens = AxisValue(shape, "tokens");
      const int experts = static_cast<int>(AxisValue(shape, "experts"));
      const int top_k = static_cast<int>(AxisValue(shape, "top_k"));
      return BackendFn([k = kernel, rule, tokens, experts, top_k](const TensorSet& t, CUstream stream) {
        LaunchConfig config;
        config.block.x = 64;
        config.grid.x = static_cast<unsigned>((tokens + 63) / 64);
        config.stream = stream;
        const void* bias = rule.bias ? t[3].data : nullptr;
        return k(config, t[0].data, t[1].data, t[2].data, bias, tokens, experts, top_k, rule.sigmoid ? 1 : 0,
                 rule.n_group, rule.topk_group, 1, rule.scale);
      });
    }
    return Status(StatusCode::kNotFound, std::string(name()) + " has no backend '" + backend + "'");
  }
};

}  // namespace

KILN_BENCH_REGISTER_ROUTINE(MoeRouteRoutine);

}  // namespace kiln::bench
