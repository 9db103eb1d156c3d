// [gpu] moe_route (kiln/ops/moe.h) on a real GPU and daemon, against a float64 CPU reference of
// the routing rule (RouteReference):
//  - tokens 1, 3, 64, 1000, 4096 x experts 8, 64, 128, 256 x top_k 1, 2, 8 x fp32/fp16/bf16
//    logits, each with softmax (renormalized and not), and DeepSeek-V3's sigmoid + correction
//    bias + group limit + scaling; outputs poisoned before every launch, padded rows on both
//    sides (the padding stays poisoned); ids exact, weights within fp32's tolerance;
//  - ties: logits and biases on a coarse grid (many equal keys and equal group sums), the lower
//    expert (and group) first; odd E (60, 1), groups of one expert, every top_k up to 16;
//  - determinism (two launches, same bits), the C ABI (the same bits), non-finite logits (ids
//    valid and distinct);
//  - refused through the real path: top_k > E, mismatched shapes, bad dtypes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/ops/moe.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::ops::MoeRouteOptions;
using kiln::ops::MoeScoring;
using kiln::testing::DeviceBuffer;
using kiln::testing::HostTensor;

// ---- The float64 reference --------------------------------------------------------------

// The rule of kiln/ops/moe.h over `tokens` rows of `experts` logits (as stored: the host values
// of the device data), `bias` empty for none. ids [tokens * top_k], weights likewise.
void RouteReference(const std::vector<double>& logits, const std::vector<double>& bias, int64_t tokens, int64_t experts,
                    int64_t top_k, const MoeRouteOptions& o, std::vector<int32_t>* ids, std::vector<double>* weights) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  ids->assign(static_cast<size_t>(tokens * top_k), -1);
  weights->assign(static_cast<size_t>(tokens * top_k), 0.0);
  std::vector<double> u(static_cast<size_t>(experts)), key(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const double* x = logits.data() + t * experts;
    double m = neg_inf, sum = 0;
    for (int64_t e = 0; e < experts; ++e) m = std::max(m, x[e]);
    for (int64_t e = 0; e < experts; ++e) {
      u[e] = o.scoring == MoeScoring::kSigmoid ? 1.0 / (1.0 + std::exp(-x[e])) : std::exp(x[e] - m);
      sum += u[e];
    }
    for (int64_t e = 0; e < experts; ++e) {
      if (o.scoring == MoeScoring::kSoftmax) u[e] /= sum;
      key[e] = u[e] + (bias.empty() ? 0.0 : bias[e]);
      if (std::isnan(key[e])) key[e] = neg_inf;
    }
    std::vector<bool> open(static_cast<size_t>(experts), true);
    if (o.n_group > 1) {
      const int64_t size = experts / o.n_group;
      std::vector<double> score(static_cast<size_t>(o.n_group));
      for (int64_t g = 0; g < o.n_group; ++g) {
        std::vector<double> k(key.begin() + g * size, key.begin() + (g + 1) * size);
        std::sort(k.begin(), k.end(), std::greater<>());
        score[g] = size >= 2 ? k[0] + k[1] : k[0];
      }
      std::vector<int64_t> order(static_cast<size_t>(o.n_group));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
      std::vector<bool> kept(static_cast<size_t>(o.n_group), false);
      for (int64_t g = 0; g < o.topk_group; ++g) kept[order[g]] = true;
      for (int64_t e = 0; e < experts; ++e) open[e] = kept[e / size];
    }
    std::vector<int64_t> order;
    for (int64_t e = 0; e < experts; ++e)
      if (open[e]) order.push_back(e);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key[a] > key[b]; });
    double chosen = 0;
    for (int64_t k = 0; k < top_k; ++k) chosen += u[order[k]];
    for (int64_t k = 0; k < top_k; ++k) {
      const double w = o.renormalize ? u[order[k]] / (chosen + 1e-20) : u[order[k]];
      (*ids)[t * top_k + k] = static_cast<int32_t>(order[k]);
      (*weights)[t * top_k + k] = w * o.routed_scaling_factor;
    }
  }
}

// ---- One routed case on the device ------------------------------------------------------

struct Case {
  int64_t tokens, experts, top_k;
  DType dtype;
  MoeRouteOptions options;
  bool bias = false;
  bool ties = false;  // logits (and bias) on a coarse grid
  int64_t pad = 0;    // extra elements per row of logits and of the outputs
};

std::string Describe(const Case& c) {
  return "T " + std::to_string(c.tokens) + " E " + std::to_string(c.experts) + " top_k " + std::to_string(c.top_k) +
         " " + kiln::DTypeName(c.dtype) + (c.options.scoring == MoeScoring::kSigmoid ? " sigmoid" : " softmax") +
         (c.options.renormalize ? " renorm" : "") + " groups " + std::to_string(c.options.n_group) + "/" +
         std::to_string(c.options.topk_group) + " scale " + std::to_string(c.options.routed_scaling_factor) +
         (c.bias ? " bias" : "") + (c.ties ? " ties" : "") + " pad " + std::to_string(c.pad);
}

struct Outputs {
  std::vector<int32_t> ids;    // [tokens, top_k + pad]
  std::vector<float> weights;  // likewise
};

class Routed {
 public:
  Routed(const Case& c, std::mt19937& rng) : c_(c) {
    const int64_t stride = c.experts + c.pad;
    logits_ = kiln::testing::MakeHostTensor(c.dtype, static_cast<size_t>(c.tokens * stride));
    std::uniform_real_distribution<float> uniform(-2.f, 2.f);
    std::uniform_int_distribution<int> grid(0, 8);
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t e = 0; e < stride; ++e) {
        float v = c.ties ? 0.25f * static_cast<float>(grid(rng)) : uniform(rng);  // ties: 0, 0.25, ..., 2
        if (e >= c.experts) v = 1e4f;  // padding: would win every choice if it were read
        logits_.Set(static_cast<size_t>(t * stride + e), v);
      }
    values_.resize(static_cast<size_t>(c.tokens * c.experts));
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t e = 0; e < c.experts; ++e)
        values_[t * c.experts + e] = logits_.Get(static_cast<size_t>(t * stride + e));
    if (c.bias) {
      std::uniform_real_distribution<float> small(-0.1f, 0.1f);
      std::uniform_int_distribution<int> bias_grid(-2, 2);
      std::vector<float> b(static_cast<size_t>(c.experts));
      for (auto& v : b) v = c.ties ? 0.0625f * static_cast<float>(bias_grid(rng)) : small(rng);
      bias_values_.assign(b.begin(), b.end());
      bias_ = std::make_unique<DeviceBuffer>(b.size() * 4);
      bias_->Upload(kiln::testing::Bytes(b.data(), b.size() * 4));
    }
    logits_dev_ = std::make_unique<DeviceBuffer>(logits_.bytes.size());
    logits_dev_->Upload(logits_.bytes);
    const size_t out = static_cast<size_t>(std::max<int64_t>(c.tokens * (c.top_k + c.pad), 1));
    ids_dev_ = std::make_unique<DeviceBuffer>(out * 4);
    weights_dev_ = std::make_unique<DeviceBuffer>(out * 4);
  }

  TensorView logits() const {
    return TensorView::Strided(logits_dev_->data(), c_.dtype, {c_.tokens, c_.experts}, {c_.experts + c_.pad, 1});
  }
  TensorView ids() const {
    return TensorView::Strided(ids_dev_->data(), DType::kInt32, {c_.tokens, c_.top_k}, {c_.top_k + c_.pad, 1});
  }
  TensorView weights() const {
    return TensorView::Strided(weights_dev_->data(), DType::kFloat32, {c_.tokens, c_.top_k}, {c_.top_k + c_.pad, 1});
  }
  TensorView bias() const { return TensorView::Contiguous(bias_->data(), DType::kFloat32, {c_.experts}); }
  bool has_bias() const { return bias_ != nullptr; }
  const std::vector<double>& values() const { return values_; }
  const std::vector<double>& bias_values() const { return bias_values_; }

  // Poisons the outputs, launches through the C++ API, and reads them back.
  Outputs Run(void* stream = nullptr) {
    ids_dev_->Poison();
    weights_dev_->Poison();
    const TensorView ids_v = ids(), weights_v = weights(), logits_v = logits();
    TensorView bias_v;
    if (has_bias()) bias_v = bias();
    const kiln::Status s = kiln::ops::moe_route(ids_v, weights_v, logits_v, has_bias() ? &bias_v : nullptr, c_.options,
                                                stream);
    INFO(Describe(c_) << ": " << s.ToString());
    REQUIRE(s.ok());
    return Read();
  }

  // The same through kiln_moe_route.
  Outputs RunC() {
    ids_dev_->Poison();
    weights_dev_->Poison();
    const TensorView ids_v = ids(), weights_v = weights(), logits_v = logits();
    DLTensor ids_dl = kiln::testing::ToDLTensor(ids_v), weights_dl = kiln::testing::ToDLTensor(weights_v);
    DLTensor logits_dl = kiln::testing::ToDLTensor(logits_v);
    TensorView bias_v;
    DLTensor bias_dl{};
    if (has_bias()) {
      bias_v = bias();
      bias_dl = kiln::testing::ToDLTensor(bias_v);
    }
    const kiln_status s = kiln_moe_route(&ids_dl, &weights_dl, &logits_dl, has_bias() ? &bias_dl : nullptr,
                                         c_.options.scoring == MoeScoring::kSigmoid ? KILN_MOE_SCORING_SIGMOID
                                                                                    : KILN_MOE_SCORING_SOFTMAX,
                                         c_.options.renormalize ? 1 : 0, c_.options.n_group, c_.options.topk_group,
                                         c_.options.routed_scaling_factor, nullptr);
    INFO(kiln_last_error());
    REQUIRE(s == KILN_OK);
    return Read();
  }

 private:
  Outputs Read() const {
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    Outputs o;
    const auto ids = ids_dev_->Download();
    const auto weights = weights_dev_->Download();
    const size_t n = static_cast<size_t>(c_.tokens * (c_.top_k + c_.pad));
    o.ids.resize(n);
    o.weights.resize(n);
    std::memcpy(o.ids.data(), ids.data(), n * 4);
    std::memcpy(o.weights.data(), weights.data(), n * 4);
    return o;
  }

  Case c_;
  HostTensor logits_;
  std::vector<double> values_, bias_values_;
  std::unique_ptr<DeviceBuffer> logits_dev_, ids_dev_, weights_dev_, bias_;
};

// ids exactly the reference's, weights within fp32's tolerance, the padding still poisoned.
void CheckAgainstReference(const Case& c, const Routed& routed, const Outputs& got) {
  std::vector<int32_t> want_ids;
  std::vector<double> want_weights;
  RouteReference(routed.values(), routed.bias_values(), c.tokens, c.experts, c.top_k, c.options, &want_ids,
                 &want_weights);
  const int64_t stride = c.top_k + c.pad;
  int64_t bad = 0;
  std::string first;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t k = 0; k < stride; ++k) {
      const int32_t id = got.ids[t * stride + k];
      const float w = got.weights[t * stride + k];
      bool ok;
      std::string what;
      if (k >= c.top_k) {
        ok = id == -1 && std::isnan(w);  // 0xFFFFFFFF: the poison, untouched
        what = "padding written";
      } else {
        const int32_t want_id = want_ids[t * c.top_k + k];
        const double want_w = want_weights[t * c.top_k + k];
        ok = id == want_id && std::isfinite(w) && std::fabs(w - want_w) <= 1e-6 + 1e-5 * std::fabs(want_w);
        what = "id " + std::to_string(id) + " (want " + std::to_string(want_id) + "), weight " + std::to_string(w) +
               " (want " + std::to_string(want_w) + ")";
      }
      if (!ok && bad++ == 0) first = "token " + std::to_string(t) + " slot " + std::to_string(k) + ": " + what;
    }
  }
  INFO(Describe(c) << ": first bad: " << first);
  CHECK(bad == 0);
}

MoeRouteOptions Softmax(bool renormalize) {
  MoeRouteOptions o;
  o.renormalize = renormalize;
  return o;
}

// DeepSeek-V3's rule at E experts: 8 groups (E >= 8), 4 kept or as many as top_k needs.
MoeRouteOptions DeepSeekLike(int64_t experts, int64_t top_k) {
  MoeRouteOptions o;
  o.scoring = MoeScoring::kSigmoid;
  o.n_group = 8;
  const int64_t size = experts / 8;
  o.topk_group = std::min<int64_t>(8, std::max<int64_t>(4, (top_k + size - 1) / size));
  o.routed_scaling_factor = 2.5;
  return o;
}

TEST_CASE("moe_route matches the float64 reference over tokens, experts, top_k, dtypes and rules",
          "[gpu][client][ops][moe]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(20261203);
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  size_t n = 0;
  for (int64_t tokens : {1, 3, 64, 1000, 4096}) {
    for (int64_t experts : {8, 64, 128, 256}) {
      for (int64_t top_k : {1, 2, 8}) {
        if (top_k > experts) continue;
        for (DType dtype : dtypes) {
          const int64_t pad = (n++ % 3 == 1) ? 3 : 0;
          std::vector<Case> cases = {
              {tokens, experts, top_k, dtype, Softmax(true), false, false, pad},
              {tokens, experts, top_k, dtype, Softmax(false), false, false, pad},
              {tokens, experts, top_k, dtype, DeepSeekLike(experts, top_k), true, false, pad},
          };
          for (const Case& c : cases) {
            Routed routed(c, rng);
            CheckAgainstReference(c, routed, routed.Run());
          }
        }
      }
    }
  }
}

TEST_CASE("moe_route breaks ties in logits, keys and group sums toward the lower id", "[gpu][client][ops][moe]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(7);
  for (int64_t experts : {8, 64, 128, 256}) {
    for (int64_t top_k : {1, 2, 8}) {
      if (top_k > experts) continue;
      for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
        MoeRouteOptions scaled_softmax = Softmax(true);
        scaled_softmax.routed_scaling_factor = 1.5;
        MoeRouteOptions grouped_softmax = Softmax(true);  // the group limit and a bias over softmax scores
        grouped_softmax.n_group = 4;
        grouped_softmax.topk_group = 2;
        const std::vector<Case> cases = {
            {257, experts, top_k, dtype, Softmax(true), false, true, 0},
            {257, experts, top_k, dtype, scaled_softmax, false, true, 1},
            {257, experts, top_k, dtype, DeepSeekLike(experts, top_k), true, true, 0},
            {257, experts, top_k, dtype, DeepSeekLike(experts, top_k), false, true, 2},
            {257, experts, top_k, dtype, grouped_softmax, true, true, 0},
        };
        for (const Case& c : cases) {
          if (c.top_k > c.options.topk_group * (c.experts / c.options.n_group)) continue;
          Routed routed(c, rng);
          CheckAgainstReference(c, routed, routed.Run());
        }
      }
    }
  }
  // Every logit equal: experts 0 .. top_k - 1, each weight 1 / top_k (renormalized softmax).
  std::vector<uint8_t> zeros(5 * 64 * 2, 0);
  kiln::testing::DeviceBuffer equal(zeros.size());
  equal.Upload(zeros);
  DeviceBuffer ids(5 * 8 * 4), weights(5 * 8 * 4);
  ids.Poison();
  weights.Poison();
  REQUIRE(kiln::ops::moe_route(TensorView::Contiguous(ids.data(), DType::kInt32, {5, 8}),
                               TensorView::Contiguous(weights.data(), DType::kFloat32, {5, 8}),
                               TensorView::Contiguous(equal.data(), DType::kBFloat16, {5, 64}), nullptr, Softmax(true))
              .ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  const auto id_bytes = ids.Download();
  const auto w_bytes = weights.Download();
  for (int t = 0; t < 5; ++t)
    for (int k = 0; k < 8; ++k) {
      int32_t id;
      float w;
      std::memcpy(&id, id_bytes.data() + (t * 8 + k) * 4, 4);
      std::memcpy(&w, w_bytes.data() + (t * 8 + k) * 4, 4);
      CHECK(id == k);
      CHECK(w == Approx(0.125).epsilon(1e-6));
    }
}

TEST_CASE("moe_route at the edges: one expert, odd E, groups of one, top_k up to 16, DeepSeek-V3",
          "[gpu][client][ops][moe]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(11);
  MoeRouteOptions one_per_group = DeepSeekLike(8, 2);  // groups of one expert: a group's score is its key
  MoeRouteOptions odd = Softmax(false);
  odd.n_group = 4;
  odd.topk_group = 3;
  MoeRouteOptions deepseek = DeepSeekLike(256, 8);
  REQUIRE(deepseek.topk_group == 4);
  const std::vector<Case> cases = {
      {3, 1, 1, DType::kFloat32, Softmax(true)},
      {3, 1, 1, DType::kBFloat16,
       [] {
         MoeRouteOptions o;
         o.scoring = MoeScoring::kSigmoid;
         return o;
       }()},
      {9, 60, 4, DType::kFloat16, odd, true},
      {9, 60, 16, DType::kBFloat16, Softmax(true), false, false, 2},
      {33, 8, 2, DType::kBFloat16, one_per_group, true},
      {33, 256, 16, DType::kFloat32, Softmax(true)},
      {33, 256, 16, DType::kBFloat16, deepseek, true},
      {4096, 256, 8, DType::kFloat32, deepseek, true},
      {4096, 256, 8, DType::kBFloat16, deepseek, true, true},
      {100, 32, 16, DType::kFloat32,
       [] {
         MoeRouteOptions o = Softmax(true);
         o.n_group = 32;  // groups of one, every group kept
         o.topk_group = 32;
         return o;
       }()},
      {100, 33, 5, DType::kFloat16, Softmax(true)},  // E just past one lane's worth
  };
  for (const Case& c : cases) {
    Routed routed(c, rng);
    CheckAgainstReference(c, routed, routed.Run());
  }
}

TEST_CASE("moe_route is deterministic, and the C ABI gives the same bits", "[gpu][client][ops][moe]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(3);
  CUstream stream = nullptr;
  KILN_CU(kiln::testing::Driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (const Case& c : {Case{1000, 256, 8, DType::kBFloat16, DeepSeekLike(256, 8), true, true},
                        Case{1000, 128, 8, DType::kFloat16, Softmax(true), false, true, 1}}) {
    Routed routed(c, rng);
    const Outputs a = routed.Run();
    const Outputs b = routed.Run(stream);
    const Outputs from_c = routed.RunC();
    INFO(Describe(c));
    CHECK(a.ids == b.ids);
    CHECK(std::memcmp(a.weights.data(), b.weights.data(), a.weights.size() * 4) == 0);
    CHECK(a.ids == from_c.ids);
    CHECK(std::memcmp(a.weights.data(), from_c.weights.data(), a.weights.size() * 4) == 0);
  }
  KILN_CU(kiln::testing::Driver().cuStreamDestroy(stream));
}

TEST_CASE("moe_route gives valid distinct ids for rows with NaN and infinite logits", "[gpu][client][ops][moe]") {
  kiln::testing::GpuSession session;
  constexpr int64_t kTokens = 4, kExperts = 64, kTopK = 8;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> host(kTokens * kExperts, 0.5f);
  for (int64_t e = 0; e < kExperts; ++e) {
    host[0 * kExperts + e] = nan;                                               // every logit NaN
    host[1 * kExperts + e] = e % 3 == 0 ? nan : 0.01f * static_cast<float>(e);  // some NaN
    host[2 * kExperts + e] = e % 5 == 0 ? inf : -inf;                           // infinities
    host[3 * kExperts + e] = -inf;                                              // every logit -inf
  }
  DeviceBuffer logits(host.size() * 4), ids(kTokens * kTopK * 4), weights(kTokens * kTopK * 4);
  logits.Upload(kiln::testing::Bytes(host.data(), host.size() * 4));
  for (MoeScoring scoring : {MoeScoring::kSoftmax, MoeScoring::kSigmoid}) {
    ids.Poison();
    MoeRouteOptions o;
    o.scoring = scoring;
    o.n_group = 4;
    o.topk_group = 2;
    REQUIRE(kiln::ops::moe_route(TensorView::Contiguous(ids.data(), DType::kInt32, {kTokens, kTopK}),
                                 TensorView::Contiguous(weights.data(), DType::kFloat32, {kTokens, kTopK}),
                                 TensorView::Contiguous(logits.data(), DType::kFloat32, {kTokens, kExperts}), nullptr,
                                 o)
                .ok());
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    const auto bytes = ids.Download();
    for (int64_t t = 0; t < kTokens; ++t) {
      std::vector<int32_t> row(kTopK);
      std::memcpy(row.data(), bytes.data() + t * kTopK * 4, kTopK * 4);
      INFO("token " << t);
      for (int32_t id : row) CHECK((id >= 0 && id < kExperts));
      std::sort(row.begin(), row.end());
      CHECK(std::unique(row.begin(), row.end()) == row.end());
    }
  }
}

TEST_CASE("moe_route refuses what it cannot route through the real path", "[gpu][client][ops][moe]") {
  kiln::testing::GpuSession session;
  DeviceBuffer logits(7 * 256 * 4), ids(7 * 16 * 4), weights(7 * 16 * 4), bias(256 * 4);
  auto require_invalid = [](const kiln::Status& status, const std::string& fragment) {
    INFO(status.ToString());
    REQUIRE(status.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(status.message().find(fragment) != std::string::npos);
  };
  auto l = [&](int64_t e, DType d = DType::kBFloat16) { return TensorView::Contiguous(logits.data(), d, {7, e}); };
  auto i = [&](int64_t k, DType d = DType::kInt32) { return TensorView::Contiguous(ids.data(), d, {7, k}); };
  auto w = [&](int64_t k, DType d = DType::kFloat32) { return TensorView::Contiguous(weights.data(), d, {7, k}); };
  require_invalid(kiln::ops::moe_route(i(9), w(9), l(8), nullptr, {}), "topk_ids: top_k (dim 1) = 9 exceeds the 8");
  require_invalid(kiln::ops::moe_route(i(2), w(3), l(8), nullptr, {}), "topk_weights: expected shape [7, 2]");
  require_invalid(kiln::ops::moe_route(i(2), w(2), l(8, DType::kInt32), nullptr, {}),
                  "logits: expected dtype fp32, fp16 or bf16, found int32");
  require_invalid(kiln::ops::moe_route(i(2, DType::kInt64), w(2), l(8), nullptr, {}),
                  "topk_ids: expected dtype int32, found int64");
  require_invalid(kiln::ops::moe_route(i(2), w(2, DType::kFloat16), l(8), nullptr, {}),
                  "topk_weights: expected dtype fp32, found fp16");
  const TensorView half_bias = TensorView::Contiguous(bias.data(), DType::kFloat16, {256});
  require_invalid(kiln::ops::moe_route(i(8), w(8), l(256), &half_bias, DeepSeekLike(256, 8)),
                  "correction_bias: expected dtype fp32, found fp16");
  require_invalid(kiln::ops::moe_route(i(16), w(16), l(64), nullptr,
                                       [] {
                                         MoeRouteOptions o = DeepSeekLike(64, 16);
                                         o.topk_group = 1;
                                         return o;
                                       }()),
                  "exceeds the 8 experts of the kept groups");
}

}  // namespace
