// [gpu] The sampling ops (kiln/ops/sampling.h) on a real GPU and daemon, against a float64 CPU
// reference of the allowed sets (RowReference):
//  - every sample lies in the allowed set and is a positive-probability token, over ops,
//    parameters, int32/int64 samples, padded rows, vocabularies 1 .. 128256 (and odd 32001,
//    4099), batches 1 .. 128, several offsets, fresh random data with zeros and ties, outputs
//    poisoned before each launch;
//  - frequencies over 20000 draws of a fixed 50-token row match the renormalized allowed
//    distribution (each token within 5 sigma, and a chi-square bound);
//  - the Philox contract: the device's draw is the host's exponential race with
//    counter (token / 4, row, offset low, offset high), key (seed low, seed high);
//  - bit-for-bit reproducibility; other offsets and seeds give other draws; vec 1 and vec 4
//    specializations, per-request tensors and scalars, the C ABI: all the same draws;
//  - ties at the k-th value kept, k = 0 and k >= V, p = 1, single-nonzero, all-zero,
//    negative/NaN rows, min_p = 1, argmax with ties;
//  - refused: wrong dtypes, ranks and parameter ranges, through the real path.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "client/ops/sampling/sampling_plan.h"  // SetSamplingClusterForTesting
#include "kiln/ops/sampling.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::ops::PerRequestFloat;
using kiln::ops::PerRequestInt;
using kiln::ops::SamplingSeed;
using kiln::testing::Bytes;
using kiln::testing::DeviceBuffer;
using kiln::testing::GpuSession;

enum class Op { kTopK, kTopP, kTopKTopP, kMinP, kArgmax };

const char* OpName(Op op) {
  switch (op) {
    case Op::kTopK: return "top_k_sampling";
    case Op::kTopP: return "top_p_sampling";
    case Op::kTopKTopP: return "top_k_top_p_sampling";
    case Op::kMinP: return "min_p_sampling";
    case Op::kArgmax: return "argmax";
  }
  return "?";
}

struct Params {
  int64_t k = 0;
  double p = 1.0;  // top_p, or min_p for kMinP
};

struct Config {
  Op op;
  Params params;
};

std::string Describe(const Config& c) {
  return std::string(OpName(c.op)) + " k=" + std::to_string(c.params.k) + " p=" + std::to_string(c.params.p);
}

// ---- The host side of the randomness contract -------------------------------------------

// Philox4x32-10, written from the paper independently of the device header.
std::array<uint32_t, 4> HostPhilox(std::array<uint32_t, 4> c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0];
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// The race key of token `token` of row `row` with probability x, in double: log2(x) -
// log2(-log2(U)), U = (word >> 9) * 2^-23 + 2^-24 from Philox word token % 4 of counter
// (token / 4, row, offset low, offset high) under key (seed low, seed high).
double HostRaceKey(double x, int64_t token, int64_t row, SamplingSeed s) {
  const auto words = HostPhilox({static_cast<uint32_t>(token / 4), static_cast<uint32_t>(row),
                                 static_cast<uint32_t>(s.offset), static_cast<uint32_t>(s.offset >> 32)},
                                static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32));
  const double u = std::ldexp(static_cast<double>(words[token % 4] >> 9), -23) + std::ldexp(1.0, -24);
  return std::log2(x) - std::log2(-std::log2(u));
}

// ---- The float64 reference of the allowed sets ------------------------------------------

float Sanitized(float v) { return std::isnan(v) || !(v > 0.0f) ? 0.0f : v; }

// One row's values sorted, with suffix masses, answering "may token value x be drawn?" for
// every op in O(log V): 1 allowed, 0 not, 2 either (a top-p comparison within 1e-9 of the row
// mass of its bound: the kernel's exact fixed-order sum may fall on either side).
class RowReference {
 public:
  RowReference(const float* row, int64_t vocab) : ascending_(static_cast<size_t>(vocab)) {
    for (int64_t i = 0; i < vocab; ++i) ascending_[i] = Sanitized(row[i]);
    std::sort(ascending_.begin(), ascending_.end());
    suffix_.assign(ascending_.size() + 1, 0.0);
    for (size_t i = ascending_.size(); i-- > 0;) suffix_[i] = suffix_[i + 1] + ascending_[i];
  }

  int64_t vocab() const { return static_cast<int64_t>(ascending_.size()); }
  float max() const { return ascending_.back(); }
  double total() const { return suffix_[0]; }
  int64_t CountAbove(float x) const { return vocab() - Upper(x); }
  double MassAbove(float x) const { return suffix_[static_cast<size_t>(Upper(x))]; }
  double MassAtLeast(float x) const { return suffix_[static_cast<size_t>(Lower(x))]; }
  float KthLargest(int64_t k) const { return ascending_[ascending_.size() - static_cast<size_t>(k)]; }

  int Allowed(Op op, const Params& prm, float x) const {
    if (op == Op::kArgmax) return x == max() ? 1 : 0;
    if (op == Op::kMinP) {
      const float min_p = std::min(std::max(static_cast<float>(prm.p), 0.0f), 1.0f);
      return x >= min_p * max() ? 1 : 0;
    }
    const bool k_on = (op == Op::kTopK || op == Op::kTopKTopP) && prm.k > 0 && prm.k < vocab();
    const bool p_on = (op == Op::kTopP || op == Op::kTopKTopP) && !(prm.p >= 1.0);
    if (x == max()) return 1;  // the largest value always stays
    if (k_on && x < KthLargest(prm.k)) return 0;
    if (!p_on) return 1;
    const double base = op == Op::kTopKTopP && k_on ? MassAtLeast(KthLargest(prm.k)) : total();
    const double bound = prm.p * base;
    const double above = MassAbove(x);
    if (std::fabs(above - bound) <= 1e-9 * total()) return 2;
    return above < bound ? 1 : 0;
  }

 private:
  int64_t Upper(float x) const {
    return std::upper_bound(ascending_.begin(), ascending_.end(), x) - ascending_.begin();
  }
  int64_t Lower(float x) const {
    return std::lower_bound(ascending_.begin(), ascending_.end(), x) - ascending_.begin();
  }
  std::vector<float> ascending_;
  std::vector<double> suffix_;
};

// ---- Device plumbing ----------------------------------------------------------------------

// probs [rows, vocab] with rows `stride` floats apart, starting `offset` floats into the buffer.
struct DeviceProbs {
  int64_t rows, vocab, stride, offset;
  std::vector<float> host;  // rows * stride (+ offset) floats, padding included
  DeviceBuffer buffer;

  DeviceProbs(std::vector<float> values, int64_t rows_, int64_t vocab_, int64_t stride_, int64_t offset_ = 0)
      : rows(rows_),
        vocab(vocab_),
        stride(stride_),
        offset(offset_),
        host(std::move(values)),
        buffer(host.size() * sizeof(float)) {
    buffer.Upload(Bytes(host.data(), host.size() * sizeof(float)));
  }
  const float* Row(int64_t r) const { return host.data() + offset + r * stride; }
  TensorView View() const {
    return TensorView::Strided(buffer.data() + offset * sizeof(float), DType::kFloat32, {rows, vocab}, {stride, 1});
  }
};

struct DeviceSamples {
  DType dtype;
  int64_t rows;
  DeviceBuffer buffer;
  DeviceSamples(DType d, int64_t r) : dtype(d), rows(r), buffer(static_cast<size_t>(r) * kiln::DTypeSize(d)) {}
  TensorView View() const { return TensorView::Contiguous(buffer.data(), dtype, {rows}); }
  void Poison() { buffer.Poison(); }  // -1 in int32 and int64
  std::vector<int64_t> Read() const {
    const std::vector<uint8_t> bytes = buffer.Download();
    std::vector<int64_t> out(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      if (dtype == DType::kInt32) {
        int32_t v;
        std::memcpy(&v, bytes.data() + i * 4, 4);
        out[i] = v;
      } else {
        std::memcpy(&out[i], bytes.data() + i * 8, 8);
      }
    }
    return out;
  }
};

kiln::Status Launch(const Config& c, const TensorView& samples, const TensorView& probs, SamplingSeed seed,
                    CUstream stream = nullptr, const TensorView* k_values = nullptr,
                    const TensorView* p_values = nullptr) {
  const PerRequestInt k{k_values, c.params.k};
  const PerRequestFloat p{p_values, c.params.p};
  switch (c.op) {
    case Op::kTopK: return kiln::ops::top_k_sampling(samples, probs, k, seed, stream);
    case Op::kTopP: return kiln::ops::top_p_sampling(samples, probs, p, seed, stream);
    case Op::kTopKTopP: return kiln::ops::top_k_top_p_sampling(samples, probs, k, p, seed, stream);
    case Op::kMinP: return kiln::ops::min_p_sampling(samples, probs, p, seed, stream);
    case Op::kArgmax: return kiln::ops::argmax(samples, probs, stream);
  }
  return kiln::Status(kiln::StatusCode::kInternal, "unknown op");
}

// Poison, launch, synchronize, read.
std::vector<int64_t> Run(const Config& c, DeviceSamples& out, const DeviceProbs& probs, SamplingSeed seed,
                         CUstream stream = nullptr, const TensorView* k_values = nullptr,
                         const TensorView* p_values = nullptr) {
  out.Poison();
  const kiln::Status status = Launch(c, out.View(), probs.View(), seed, stream, k_values, p_values);
  INFO(Describe(c) << ": " << status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  return out.Read();
}

// ---- Random rows --------------------------------------------------------------------------

enum class RowKind { kLlm, kFlat, kTies };

// A softmax of N(0, sigma) logits (sigma per row), with a few exact zeros and repeated values,
// sometimes scaled (unnormalized); kFlat: uniform in [0.9, 1.1) (thresholds fall in crowded
// value bands, the kernels' slow paths); kTies: a handful of distinct values.
void FillRow(float* row, int64_t vocab, RowKind kind, std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  if (kind == RowKind::kFlat) {
    for (int64_t i = 0; i < vocab; ++i) row[i] = 0.9f + 0.2f * unit(rng);
    return;
  }
  if (kind == RowKind::kTies) {
    const float levels[] = {0.5f, 0.25f, 0.125f, 0.1f, 0.01f, 0.0f};
    for (int64_t i = 0; i < vocab; ++i) row[i] = levels[rng() % 6];
    return;
  }
  const double sigmas[] = {0.5, 1.0, 2.0, 4.0};
  std::normal_distribution<double> normal(0.0, sigmas[rng() % 4]);
  std::vector<double> logits(static_cast<size_t>(vocab));
  for (auto& l : logits) l = normal(rng);
  const double top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (auto& l : logits) sum += (l = std::exp(l - top));
  const double scale = rng() % 3 == 0 ? 3.7 : 1.0;
  for (int64_t i = 0; i < vocab; ++i) row[i] = static_cast<float>(logits[i] / sum * scale);
  for (int64_t i = 0; i < vocab / 20; ++i) row[rng() % vocab] = 0.0f;                                 // zeros
  for (int64_t i = 0; i + 1 < vocab && i < vocab / 20; ++i) row[rng() % vocab] = row[rng() % vocab];  // ties
}

// ---- Tests --------------------------------------------------------------------------------

TEST_CASE("host Philox4x32-10 matches Random123's known answers", "[sampling]") {
  // The reference of the device header's Philox (kiln/common/philox.cuh): the KATs of
  // Random123 (tests/kat_vectors).
  CHECK(HostPhilox({0, 0, 0, 0}, 0, 0) == std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(HostPhilox({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffff, 0xffffffff) ==
        std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(HostPhilox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0) ==
        std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("sampled tokens lie in the allowed set over ops and shapes", "[gpu][client][ops][sampling]") {
  GpuSession session;
  std::mt19937 rng(20260107);
  struct Shape {
    int64_t rows, vocab, pad, offsets;
    RowKind kind;
  };
  const Shape shapes[] = {
      {1, 1, 0, 4, RowKind::kLlm},       {3, 7, 1, 8, RowKind::kLlm},      {64, 50, 0, 8, RowKind::kLlm},
      {32, 50, 2, 4, RowKind::kTies},    {16, 1000, 0, 6, RowKind::kLlm},  {8, 4099, 5, 4, RowKind::kLlm},
      {4, 32001, 0, 4, RowKind::kLlm},   {1, 128256, 0, 3, RowKind::kLlm}, {128, 128256, 0, 2, RowKind::kLlm},
      {8, 128256, 4, 2, RowKind::kFlat},
  };
  CUstream stream = nullptr;
  KILN_CU(kiln::testing::Driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (const Shape& shape : shapes) {
    const int64_t stride = shape.vocab + shape.pad;
    std::vector<float> host(static_cast<size_t>(shape.rows * stride), 1e30f);  // padding: huge, never drawn
    for (int64_t r = 0; r < shape.rows; ++r) FillRow(host.data() + r * stride, shape.vocab, shape.kind, rng);
    DeviceProbs probs(std::move(host), shape.rows, shape.vocab, stride);
    const int64_t v = shape.vocab;
    std::vector<Config> configs = {
        {Op::kTopK, {1}},           {Op::kTopK, {2}},           {Op::kTopK, {50}},
        {Op::kTopK, {1000}},        {Op::kTopK, {v}},           {Op::kTopK, {0}},
        {Op::kTopK, {v - 1}},       {Op::kTopP, {0, 0.1}},      {Op::kTopP, {0, 0.5}},
        {Op::kTopP, {0, 0.9}},      {Op::kTopP, {0, 0.99}},     {Op::kTopP, {0, 1.0}},
        {Op::kTopKTopP, {50, 0.9}}, {Op::kTopKTopP, {5, 0.5}},  {Op::kTopKTopP, {1000, 0.95}},
        {Op::kTopKTopP, {0, 0.8}},  {Op::kTopKTopP, {20, 1.0}}, {Op::kMinP, {0, 0.0}},
        {Op::kMinP, {0, 0.05}},     {Op::kMinP, {0, 0.3}},      {Op::kMinP, {0, 1.0}},
        {Op::kArgmax, {}},
    };
    if (shape.kind == RowKind::kFlat) {  // thresholds deep inside crowded bands
      configs.push_back({Op::kTopK, {60000}});
      configs.push_back({Op::kTopKTopP, {100000, 0.3}});
    }
    struct Result {
      size_t config;
      SamplingSeed seed;
      std::vector<int64_t> samples;
    };
    std::vector<Result> results;
    for (size_t c = 0; c < configs.size(); ++c) {
      // int64 samples on every other config where the rows allow 16-byte loads: each new
      // (op, samples dtype, vec) is a compile in the daemon, so the grid does not take all 30.
      const bool vec4 = shape.vocab % 4 == 0 && stride % 4 == 0;
      DeviceSamples out(c % 2 == 1 && vec4 ? DType::kInt64 : DType::kInt32, shape.rows);
      for (int64_t o = 0; o < shape.offsets; ++o) {
        const SamplingSeed seed{0x5eed0000u + c, static_cast<uint64_t>(o) * 7919u};
        results.push_back({c, seed, Run(configs[c], out, probs, seed, o % 2 == 0 ? nullptr : stream)});
        if (configs[c].op == Op::kArgmax) break;  // no randomness
      }
    }
    // Check row by row (one reference in memory at a time).
    int64_t bad = 0, checked = 0;
    std::string first_bad;
    std::map<size_t, std::set<int64_t>> distinct;  // per config: tokens seen
    for (int64_t r = 0; r < shape.rows; ++r) {
      const RowReference ref(probs.Row(r), v);
      for (const Result& res : results) {
        const Config& c = configs[res.config];
        const int64_t s = res.samples[r];
        ++checked;
        bool ok = s >= 0 && s < v;
        if (ok && c.op != Op::kArgmax) {
          const float x = Sanitized(probs.Row(r)[s]);
          ok = ref.max() == 0.0f ? s == 0  // no positive value: token 0
                                 : x > 0.0f && ref.Allowed(c.op, c.params, x) != 0;
        }
        if (ok && c.op == Op::kArgmax) {
          const float* row = probs.Row(r);
          ok = row[s] == ref.max() && std::find(row, row + v, ref.max()) - row == s;
        }
        if (!ok && bad++ == 0)
          first_bad = Describe(c) + " row " + std::to_string(r) + " offset " + std::to_string(res.seed.offset) +
                      ": sample " + std::to_string(s) +
                      (s >= 0 && s < v ? " (p = " + std::to_string(probs.Row(r)[s]) + ")" : " (out of range)");
        distinct[res.config].insert(s);
      }
    }
    INFO("rows " << shape.rows << " vocab " << v << " pad " << shape.pad << ": " << checked << " samples checked");
    INFO("first bad: " << first_bad);
    CHECK(bad == 0);
    // Randomness is in use: with no truncation and several offsets, more than one token shows up.
    if (v >= 50 && shape.kind == RowKind::kLlm) CHECK(distinct[5].size() > 1);  // top_k k = 0
  }
  KILN_CU(kiln::testing::Driver().cuStreamDestroy(stream));
}

TEST_CASE("frequencies over 20000 draws match the renormalized allowed distribution", "[gpu][client][ops][sampling]") {
  GpuSession session;
  constexpr int64_t kVocab = 50, kDraws = 20000;
  // A fixed row: a softmax of N(0, 1.5) logits, token 3 exactly 0, tokens 10 and 11 tied,
  // scaled by 2 (unnormalized).
  std::mt19937 rng(50);
  std::normal_distribution<double> normal(0.0, 1.5);
  std::vector<float> row(kVocab);
  double sum = 0;
  std::vector<double> e(kVocab);
  for (auto& x : e) sum += (x = std::exp(normal(rng)));
  for (int64_t i = 0; i < kVocab; ++i) row[i] = static_cast<float>(2.0 * e[i] / sum);
  row[3] = 0.0f;
  row[11] = row[10];
  std::vector<float> host;
  for (int64_t r = 0; r < kDraws; ++r) host.insert(host.end(), row.begin(), row.end());
  DeviceProbs probs(std::move(host), kDraws, kVocab, kVocab);
  const RowReference ref(row.data(), kVocab);
  DeviceSamples out(DType::kInt32, kDraws);

  const Config configs[] = {{Op::kTopK, {0}},          {Op::kTopK, {10}},     {Op::kTopK, {1}},
                            {Op::kTopP, {0, 0.8}},     {Op::kTopP, {0, 0.3}}, {Op::kTopKTopP, {20, 0.7}},
                            {Op::kTopKTopP, {5, 0.9}}, {Op::kMinP, {0, 0.1}}, {Op::kMinP, {0, 0.0}}};
  for (const Config& c : configs) {
    INFO(Describe(c));
    std::vector<double> q(kVocab, 0.0);
    double allowed_mass = 0;
    for (int64_t i = 0; i < kVocab; ++i) {
      const int a = ref.Allowed(c.op, c.params, row[i]);
      REQUIRE(a != 2);  // the row keeps clear of every boundary
      if (a == 1) allowed_mass += (q[i] = row[i]);
    }
    for (auto& x : q) x /= allowed_mass;
    const std::vector<int64_t> samples = Run(c, out, probs, {12345, 678});
    std::vector<int64_t> counts(kVocab, 0);
    int64_t out_of_range = 0;
    for (int64_t s : samples) {
      if (s < 0 || s >= kVocab) ++out_of_range;
      else ++counts[s];
    }
    CHECK(out_of_range == 0);
    // Tokens expected at least 5 times: within 5 sigma each, and a cell of the chi-square;
    // rarer ones: pooled into one cell, each within a loose Poisson bound.
    double chi2 = 0, pooled_expected = 0, worst_sigmas = 0;
    int64_t pooled_count = 0;
    int cells = 0;
    std::string worst;
    for (int64_t i = 0; i < kVocab; ++i) {
      const double expected = kDraws * q[i];
      if (q[i] == 0) {
        INFO("token " << i << " is not allowed");
        CHECK(counts[i] == 0);
        continue;
      }
      if (expected < 5) {
        pooled_expected += expected;
        pooled_count += counts[i];
        INFO("token " << i << ": " << counts[i] << " draws, expected " << expected);
        CHECK(counts[i] <= expected + 5 * std::sqrt(expected) + 5);
        continue;
      }
      const double sigmas = std::fabs(counts[i] - expected) / std::sqrt(expected * (1 - q[i]));
      if (sigmas > worst_sigmas) {
        worst_sigmas = sigmas;
        worst = "token " + std::to_string(i) + ": " + std::to_string(counts[i]) + " draws, expected " +
                std::to_string(expected);
      }
      chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
      ++cells;
    }
    if (pooled_expected > 0) {
      chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / std::max(pooled_expected, 1.0);
      ++cells;
      CHECK(std::fabs(pooled_count - pooled_expected) <= 5 * std::sqrt(pooled_expected) + 5);
    }
    INFO("worst: " << worst << " (" << worst_sigmas << " sigma); chi2 " << chi2 << " over " << cells << " cells");
    CHECK(worst_sigmas <= 5.0);
    const double df = std::max(1, cells - 1);
    CHECK(chi2 <= df + 8.0 * std::sqrt(2.0 * df) + 10.0);
  }
}

TEST_CASE("the draw is the host exponential race over Philox of token/4 row offset and seed",
          "[gpu][client][ops][sampling]") {
  GpuSession session;
  constexpr int64_t kRows = 256, kVocab = 37;
  std::mt19937 rng(37);
  std::vector<float> host(kRows * kVocab);
  for (int64_t r = 0; r < kRows; ++r) FillRow(host.data() + r * kVocab, kVocab, RowKind::kLlm, rng);
  DeviceProbs probs(host, kRows, kVocab, kVocab);
  DeviceSamples out(DType::kInt32, kRows);
  // Offsets and seeds above 2^32 exercise both counter and key words.
  for (const SamplingSeed seed : {SamplingSeed{1, 0}, SamplingSeed{0x123456789abcdefull, 0xfedcba9876543210ull}}) {
    // top_k 8 / top_p / top_k_top_p race the tokens above the threshold's band from the race
    // queue after the gather pass, and the band's own from the list: the same tickets.
    for (const Config& c : {Config{Op::kTopK, {0}}, Config{Op::kTopK, {8}}, Config{Op::kMinP, {0, 0.2}},
                            Config{Op::kTopP, {0, 0.9}}, Config{Op::kTopKTopP, {8, 0.9}}}) {
      const std::vector<int64_t> samples = Run(c, out, probs, seed);
      int64_t compared = 0, mismatched = 0;
      for (int64_t r = 0; r < kRows; ++r) {
        const RowReference ref(probs.Row(r), kVocab);
        double best = -std::numeric_limits<double>::infinity(), second = best;
        int64_t winner = -1;
        for (int64_t i = 0; i < kVocab; ++i) {
          const float x = Sanitized(probs.Row(r)[i]);
          if (x <= 0 || ref.Allowed(c.op, c.params, x) != 1) continue;
          const double key = HostRaceKey(x, i, r, seed);
          if (key > best) {
            second = best;
            best = key;
            winner = i;
          } else if (key > second) {
            second = key;
          }
        }
        if (best - second < 1e-3) continue;  // the device's fp32 keys may order a near tie either way
        ++compared;
        if (samples[r] != winner) ++mismatched;
      }
      INFO(Describe(c) << " seed " << seed.seed << " offset " << seed.offset << ": " << compared << " rows compared");
      CHECK(compared > kRows / 2);
      CHECK(mismatched == 0);
    }
  }
}

TEST_CASE("draws reproduce bit for bit and depend only on probs params seed and offset",
          "[gpu][client][ops][sampling]") {
  GpuSession session;
  constexpr int64_t kRows = 128, kVocab = 32000;
  std::mt19937 rng(99);
  std::vector<float> host(kRows * kVocab + 1);
  for (int64_t r = 0; r < kRows; ++r) FillRow(host.data() + 1 + r * kVocab, kVocab, RowKind::kLlm, rng);
  DeviceProbs aligned(std::vector<float>(host.begin() + 1, host.end()), kRows, kVocab, kVocab);  // vec 4
  DeviceProbs shifted(host, kRows, kVocab, kVocab, 1);  // one float off: vec 1, same values
  DeviceSamples a(DType::kInt32, kRows), b(DType::kInt64, kRows);
  const Config configs[] = {
      {Op::kTopK, {50}}, {Op::kTopP, {0, 0.95}}, {Op::kTopKTopP, {100, 0.9}}, {Op::kMinP, {0, 0.02}}, {Op::kTopK, {0}}};
  for (const Config& c : configs) {
    INFO(Describe(c));
    const SamplingSeed seed{42, 1000};
    const auto first = Run(c, a, aligned, seed);
    CHECK(Run(c, a, aligned, seed) == first);  // same call, same bits
    CHECK(Run(c, b, aligned, seed) == first);  // int64 samples: the same draws
    CHECK(Run(c, a, shifted, seed) == first);  // vec 1 specialization: the same draws
    auto differing = [&](const std::vector<int64_t>& other) {
      int64_t n = 0;
      for (int64_t r = 0; r < kRows; ++r) n += other[r] != first[r];
      return n;
    };
    // Another offset or seed: independent draws (rows may coincide by chance).
    CHECK(differing(Run(c, a, aligned, {42, 1001})) > kRows / 4);
    CHECK(differing(Run(c, a, aligned, {43, 1000})) > kRows / 4);
  }

  // Per-request tensors: row r with k_r / p_r draws what a scalar call with that value draws.
  std::vector<int32_t> ks(kRows);
  std::vector<float> ps(kRows);
  const int32_t k_choices[] = {0, 1, 5, 50, 40000};
  const float p_choices[] = {1.0f, 0.5f, 0.9f, 0.99f};
  for (int64_t r = 0; r < kRows; ++r) {
    ks[r] = k_choices[r % 5];
    ps[r] = p_choices[r % 4];
  }
  DeviceBuffer dk(ks.size() * 4), dp(ps.size() * 4);
  dk.Upload(Bytes(ks.data(), ks.size() * 4));
  dp.Upload(Bytes(ps.data(), ps.size() * 4));
  const auto tk = TensorView::Contiguous(dk.data(), DType::kInt32, {kRows});
  const auto tp = TensorView::Contiguous(dp.data(), DType::kFloat32, {kRows});
  const SamplingSeed seed{7, 7};
  for (Op op : {Op::kTopK, Op::kTopP, Op::kTopKTopP, Op::kMinP}) {
    INFO(OpName(op));
    const bool uses_k = op == Op::kTopK || op == Op::kTopKTopP;
    const bool uses_p = op != Op::kTopK;
    const auto per_row = Run({op, {0, 1.0}}, a, aligned, seed, nullptr, uses_k ? &tk : nullptr, uses_p ? &tp : nullptr);
    int64_t mismatched = 0;
    std::map<std::pair<int64_t, float>, std::vector<int64_t>> scalar_runs;
    for (int64_t r = 0; r < kRows; ++r) {
      const std::pair<int64_t, float> key{uses_k ? ks[r] : 0, uses_p ? ps[r] : 1.0f};
      auto it = scalar_runs.find(key);
      if (it == scalar_runs.end()) {
        // The scalar is the same fp32 value as the tensor entry, widened.
        it = scalar_runs.emplace(key, Run({op, {key.first, static_cast<double>(key.second)}}, b, aligned, seed)).first;
      }
      mismatched += it->second[r] != per_row[r];
    }
    CHECK(mismatched == 0);
  }

  // The C ABI draws what the C++ API draws.
  int64_t probs_shape[2] = {kRows, kVocab};
  int64_t samples_shape[1] = {kRows};
  DLTensor dl_probs{};
  dl_probs.data = aligned.buffer.data();
  dl_probs.device = {kDLCUDA, 0};
  dl_probs.ndim = 2;
  dl_probs.dtype = {kDLFloat, 32, 1};
  dl_probs.shape = probs_shape;
  DLTensor dl_samples = dl_probs;
  dl_samples.data = b.buffer.data();
  dl_samples.ndim = 1;
  dl_samples.dtype = {kDLInt, 64, 1};
  dl_samples.shape = samples_shape;
  const auto cpp = Run({Op::kTopKTopP, {50, 0.9}}, a, aligned, {5, 6});
  b.Poison();
  REQUIRE(kiln_top_k_top_p_sampling(&dl_samples, &dl_probs, nullptr, 50, nullptr, 0.9, 5, 6, nullptr) == KILN_OK);
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  CHECK(b.Read() == cpp);
  const auto cpp_argmax = Run({Op::kArgmax, {}}, a, aligned, {});
  b.Poison();
  REQUIRE(kiln_argmax(&dl_samples, &dl_probs, nullptr) == KILN_OK);
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  CHECK(b.Read() == cpp_argmax);
}

TEST_CASE("a row shared by a cluster of blocks draws what one block draws", "[gpu][client][ops][sampling]") {
  GpuSession session(90);  // clusters are sm_90+ (below, every batch runs a block per row)
  std::mt19937 rng(2026);
  struct Shape {
    int64_t rows, vocab;
    RowKind kind;
  };
  // Llama's vocabulary; a vocabulary that does not fill the cluster's stretches evenly; rows
  // narrower than one block's first stretch (some blocks of the cluster get nothing); flat rows
  // (the list and the race queue overflow: passes over the row) and ties.
  const Shape shapes[] = {{16, 128256, RowKind::kLlm},
                          {5, 4099, RowKind::kLlm},
                          {7, 50, RowKind::kLlm},
                          {4, 128256, RowKind::kFlat},
                          {9, 3001, RowKind::kTies}};
  for (const Shape& shape : shapes) {
    std::vector<float> host(static_cast<size_t>(shape.rows * shape.vocab));
    for (int64_t r = 0; r < shape.rows; ++r) FillRow(host.data() + r * shape.vocab, shape.vocab, shape.kind, rng);
    DeviceProbs probs(std::move(host), shape.rows, shape.vocab, shape.vocab);
    DeviceSamples out(DType::kInt64, shape.rows);
    const Config configs[] = {{Op::kTopK, {50}},      {Op::kTopK, {0}},           {Op::kTopP, {0, 0.9}},
                              {Op::kTopP, {0, 0.99}}, {Op::kTopKTopP, {50, 0.9}}, {Op::kTopKTopP, {2000, 0.95}},
                              {Op::kMinP, {0, 0.05}}, {Op::kArgmax, {}}};
    for (const Config& c : configs) {
      INFO(Describe(c) << " rows " << shape.rows << " vocab " << shape.vocab);
      kiln::client::SetSamplingClusterForTesting(1);
      const std::vector<int64_t> one_block = Run(c, out, probs, {11, 12});
      for (int cluster : {2, 4, 8}) {
        INFO("cluster " << cluster);
        kiln::client::SetSamplingClusterForTesting(cluster);
        CHECK(Run(c, out, probs, {11, 12}) == one_block);
      }
    }
  }
  kiln::client::SetSamplingClusterForTesting(-1);
}

TEST_CASE("ties at the k-th value and disabled limits and degenerate rows", "[gpu][client][ops][sampling]") {
  GpuSession session;
  constexpr int64_t kRows = 4000, kVocab = 64;
  auto batch_of = [&](const std::vector<float>& row) {
    std::vector<float> host;
    for (int64_t r = 0; r < kRows; ++r) host.insert(host.end(), row.begin(), row.end());
    return DeviceProbs(std::move(host), kRows, static_cast<int64_t>(row.size()), static_cast<int64_t>(row.size()));
  };
  DeviceSamples out(DType::kInt32, kRows);
  auto histogram = [&](const std::vector<int64_t>& samples) {
    std::map<int64_t, int64_t> h;
    for (int64_t s : samples) ++h[s];
    return h;
  };

  SECTION("ties at the k-th value are all kept") {
    // One 0.3, five 0.1 (tokens 7, 19, 20, 40, 63), the rest 0.001: k = 3 keeps all six.
    std::vector<float> row(kVocab, 0.001f);
    row[30] = 0.3f;
    for (int i : {7, 19, 20, 40, 63}) row[i] = 0.1f;
    DeviceProbs probs = batch_of(row);
    for (const Config& c : {Config{Op::kTopK, {3}}, Config{Op::kTopK, {6}}, Config{Op::kTopKTopP, {2, 1.0}}}) {
      INFO(Describe(c));
      const auto h = histogram(Run(c, out, probs, {1, 2}));
      std::map<int64_t, int64_t> expected_keys = {{7, 0}, {19, 0}, {20, 0}, {30, 0}, {40, 0}, {63, 0}};
      for (const auto& [token, n] : h) CHECK(expected_keys.count(token) == 1);
      // 4000 draws of shares 3/8 and 1/8: each of the six appears.
      for (const auto& entry : expected_keys) CHECK(h.count(entry.first) == 1);
    }
    // k = 1 keeps only the 0.3; k = 7 adds every 0.001 (the 7th largest is 0.001, tied 58 times).
    CHECK(histogram(Run({Op::kTopK, {1}}, out, probs, {1, 2})) == std::map<int64_t, int64_t>{{30, kRows}});
    CHECK(histogram(Run({Op::kTopK, {7}}, out, probs, {1, 2})).size() > 6);
  }

  SECTION("k = 0, k >= V and p = 1 do not truncate") {
    std::vector<float> row(kVocab);
    for (int64_t i = 0; i < kVocab; ++i) row[i] = 1.0f + static_cast<float>(i % 3);  // flat: every token likely
    row[5] = 0.0f;
    DeviceProbs probs = batch_of(row);
    for (const Config& c :
         {Config{Op::kTopK, {0}}, Config{Op::kTopK, {kVocab}}, Config{Op::kTopK, {kVocab + 100}},
          Config{Op::kTopP, {0, 1.0}}, Config{Op::kTopKTopP, {0, 1.0}}, Config{Op::kMinP, {0, 0.0}}}) {
      INFO(Describe(c));
      const auto h = histogram(Run(c, out, probs, {3, 4}));
      CHECK(h.size() == kVocab - 1);  // every token but the zero
      CHECK(h.count(5) == 0);
    }
  }

  SECTION("a single nonzero, all zeros, negatives and NaN") {
    std::vector<float> single(kVocab, 0.0f);
    single[41] = 1e-30f;  // tiny but positive: still the only one
    std::vector<float> weird(kVocab, -1.0f);
    for (int64_t i = 0; i < kVocab; i += 3) weird[i] = std::numeric_limits<float>::quiet_NaN();
    weird[13] = 0.25f;
    weird[14] = -0.0f;
    for (const auto& [row, want] :
         {std::pair{single, int64_t{41}}, std::pair{std::vector<float>(kVocab, 0.0f), int64_t{0}},
          std::pair{weird, int64_t{13}}}) {
      DeviceProbs probs = batch_of(row);
      for (const Config& c :
           {Config{Op::kTopK, {1}}, Config{Op::kTopK, {0}}, Config{Op::kTopK, {10}}, Config{Op::kTopP, {0, 1e-6}},
            Config{Op::kTopP, {0, 1.0}}, Config{Op::kTopKTopP, {3, 0.5}}, Config{Op::kMinP, {0, 1.0}},
            Config{Op::kMinP, {0, 0.0}}}) {
        INFO(Describe(c) << ", expecting " << want);
        CHECK(histogram(Run(c, out, probs, {5, 6})) == std::map<int64_t, int64_t>{{want, kRows}});
      }
    }
  }

  SECTION("min_p = 1 and tiny top_p keep only the largest value (and its ties)") {
    std::vector<float> row(kVocab, 0.01f);
    row[9] = row[50] = 0.2f;
    DeviceProbs probs = batch_of(row);
    for (const Config& c :
         {Config{Op::kMinP, {0, 1.0}}, Config{Op::kTopP, {0, 1e-9}}, Config{Op::kTopKTopP, {50, 1e-9}}}) {
      INFO(Describe(c));
      const auto h = histogram(Run(c, out, probs, {7, 8}));
      CHECK(h.size() == 2);
      CHECK(h.count(9) == 1);
      CHECK(h.count(50) == 1);
    }
  }
}

TEST_CASE("argmax picks the largest value and the lowest index on ties", "[gpu][client][ops][sampling]") {
  GpuSession session;
  std::mt19937 rng(123);
  for (int64_t vocab : {1, 3, 1000, 32001, 128256}) {
    constexpr int64_t kRows = 33;
    std::vector<float> host(kRows * vocab);
    std::normal_distribution<float> normal(0.0f, 10.0f);
    for (auto& x : host) x = normal(rng);  // logits: negative values too
    for (int64_t r = 0; r < kRows; ++r) {
      float* row = host.data() + r * vocab;
      if (r % 3 == 0 && vocab > 2) {  // a planted tie at the maximum
        const float top = *std::max_element(row, row + vocab) + 1.0f;
        row[rng() % vocab] = top;
        row[rng() % vocab] = top;
      }
      if (r % 5 == 1) std::fill(row, row + vocab, -3.0f);  // all equal: index 0
    }
    DeviceProbs probs(host, kRows, vocab, vocab);
    DeviceSamples out(DType::kInt64, kRows);
    const auto samples = Run({Op::kArgmax, {}}, out, probs, {});
    int64_t bad = 0;
    for (int64_t r = 0; r < kRows; ++r) {
      const float* row = probs.Row(r);
      bad += samples[r] != std::max_element(row, row + vocab) - row;  // first of the largest
    }
    INFO("vocab " << vocab);
    CHECK(bad == 0);
  }
}

TEST_CASE("sampling refuses what it has no kernel for through the real path", "[gpu][client][ops][sampling]") {
  GpuSession session;
  DeviceBuffer probs_buf(7 * 100 * 4), samples_buf(7 * 8), params_buf(7 * 8);
  auto probs = TensorView::Contiguous(probs_buf.data(), DType::kFloat32, {7, 100});
  auto samples = TensorView::Contiguous(samples_buf.data(), DType::kInt32, {7});
  auto require_invalid = [](const kiln::Status& status, const std::string& fragment) {
    INFO(status.ToString());
    REQUIRE(status.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(status.message().find(fragment) != std::string::npos);
  };
  require_invalid(kiln::ops::top_k_sampling(
                      samples, TensorView::Contiguous(probs_buf.data(), DType::kBFloat16, {7, 100}), {nullptr, 5}, {}),
                  "probs: expected dtype fp32, found bf16");
  require_invalid(kiln::ops::argmax(samples, TensorView::Contiguous(probs_buf.data(), DType::kFloat32, {7, 10, 10})),
                  "probs: expected a 2-D tensor [B, V], found rank 3");
  require_invalid(kiln::ops::argmax(TensorView::Contiguous(samples_buf.data(), DType::kFloat32, {7}), probs),
                  "samples: expected dtype int32 or int64, found fp32");
  require_invalid(kiln::ops::argmax(TensorView::Contiguous(samples_buf.data(), DType::kInt32, {6}), probs),
                  "samples: expected shape [7] (probs' rows), found [6]");
  require_invalid(kiln::ops::top_k_sampling(samples, probs, {nullptr, -1}, {}), "top_k: expected k >= 0");
  require_invalid(kiln::ops::top_p_sampling(samples, probs, {nullptr, 0.0}, {}), "top_p: expected a value in (0, 1]");
  require_invalid(kiln::ops::top_p_sampling(samples, probs, {nullptr, 1.5}, {}), "top_p: expected a value in (0, 1]");
  require_invalid(kiln::ops::min_p_sampling(samples, probs, {nullptr, -0.5}, {}), "min_p: expected a value in [0, 1]");
  require_invalid(kiln::ops::min_p_sampling(samples, probs, {nullptr, 2.0}, {}), "min_p: expected a value in [0, 1]");
  auto k64 = TensorView::Contiguous(params_buf.data(), DType::kInt64, {7});
  require_invalid(kiln::ops::top_k_sampling(samples, probs, {&k64, 0}, {}), "top_k: expected dtype int32, found int64");
}

}  // namespace

namespace {

// Not a test: timings for docs/kernels-sampling.md. B = 128, V = 128256 (Llama 3), softmax
// rows of N(0, 2) logits; two input buffers alternate (131 MB, more than L2); each op's
// samples of the last call are checked against the reference first. Reports the mean of 200
// back-to-back calls (host clock around a synchronize; launch included), median of 5 repeats.
// Run with "[.bench]".
TEST_CASE("sampling timings at B=128 V=128256", "[.bench][sampling]") {
  GpuSession session;
  constexpr int64_t kRows = 128, kVocab = 128256;
  std::mt19937 rng(2026);
  std::vector<std::unique_ptr<DeviceProbs>> inputs;
  for (int copy = 0; copy < 2; ++copy) {
    std::vector<float> host(kRows * kVocab);
    std::normal_distribution<double> normal(0.0, 2.0);
    for (int64_t r = 0; r < kRows; ++r) {
      float* row = host.data() + r * kVocab;
      std::vector<double> l(kVocab);
      double sum = 0;
      for (auto& x : l) sum += (x = std::exp(normal(rng)));
      for (int64_t i = 0; i < kVocab; ++i) row[i] = static_cast<float>(l[i] / sum);
    }
    inputs.push_back(std::make_unique<DeviceProbs>(std::move(host), kRows, kVocab, kVocab));
  }
  DeviceSamples out(DType::kInt32, kRows);
  const Config configs[] = {{Op::kTopK, {50}},          {Op::kTopP, {0, 0.9}},
                            {Op::kTopKTopP, {50, 0.9}}, {Op::kTopKTopP, {1000, 0.95}},
                            {Op::kMinP, {0, 0.1}},      {Op::kTopK, {0}},
                            {Op::kArgmax, {}}};
  const auto& d = kiln::testing::Driver();
  for (const Config& c : configs) {
    // Correct first: the samples of a call lie in the allowed sets.
    const auto samples = Run(c, out, *inputs[0], {1, 1});
    int64_t bad = 0;
    for (int64_t r = 0; r < kRows; ++r) {
      const RowReference ref(inputs[0]->Row(r), kVocab);
      const float x = Sanitized(inputs[0]->Row(r)[samples[r]]);
      bad += c.op == Op::kArgmax ? x != ref.max() : (x <= 0 || ref.Allowed(c.op, c.params, x) == 0);
    }
    INFO(Describe(c));
    REQUIRE(bad == 0);
    std::vector<double> means;
    for (int repeat = 0; repeat < 5; ++repeat) {
      constexpr int kCalls = 200;
      KILN_CU(d.cuCtxSynchronize());
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i)
        REQUIRE(Launch(c, out.View(), inputs[i % 2]->View(), {1, static_cast<uint64_t>(i)}).ok());
      KILN_CU(d.cuCtxSynchronize());
      means.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                      kCalls);
    }
    std::sort(means.begin(), means.end());
    std::printf("%-40s B=%lld V=%lld: %7.1f us per call (median of 5 x 200; min %.1f, max %.1f)\n", Describe(c).c_str(),
                static_cast<long long>(kRows), static_cast<long long>(kVocab), means[2], means[0], means[4]);
  }
}

}  // namespace
