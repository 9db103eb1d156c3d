// The samplers' allowed sets, computed on the host as kiln/ops/sampling.h defines them, and the
// membership check of drawn tokens: hand-made rows with ties at every threshold.
#include "bench/op/sampling_check.h"

#include <catch2/catch.hpp>

#include <cmath>

namespace kiln::bench {
namespace {

// Row values in token order, exact in binary so the masses are exact: 0.0, negatives and NaN
// are never drawn. Positive values, largest first: a 0.375, b 0.1875 (twice), c 0.125,
// d 0.078125, e 0.046875; sum 1. Mass above: a 0, b 0.375, c 0.75, d 0.875, e 0.953125.
const std::vector<float> kRow = {0.078125f, 0.375f, 0.0f, 0.1875f, 0.1875f, -1.0f, NAN, 0.125f, 0.046875f};

AllowedSet Allowed(SamplingRule rule, SamplingParams p) {
  return AllowedTokens(rule, kRow.data(), static_cast<int64_t>(kRow.size()), p);
}

TEST_CASE("allowed sets: top-k keeps ties at the k-th value, k <= 0 or >= vocab is no top-k", "[bench]") {
  AllowedSet k2 = Allowed(SamplingRule::kTopK, {.top_k = 2});
  CHECK(k2.threshold == 0.1875f);
  CHECK(k2.size == 3);  // a and both b
  CHECK(k2.mass == 0.75);
  CHECK(k2.row_mass == 1.0);
  CHECK(Allowed(SamplingRule::kTopK, {.top_k = 1}).size == 1);
  CHECK(Allowed(SamplingRule::kTopK, {.top_k = 0}).size == 6);  // every positive value
  CHECK(Allowed(SamplingRule::kTopK, {.top_k = 9}).size == 6);  // k >= vocab
  CHECK(Allowed(SamplingRule::kTopK, {.top_k = 8}).size == 6);  // fewer positive values than k
  CHECK(Allowed(SamplingRule::kTopK, {.top_k = -3}).size == 6);
}

TEST_CASE("allowed sets: top-p keeps v while the mass above v is below p * row sum", "[bench]") {
  CHECK(Allowed(SamplingRule::kTopP, {.top_p = 0.25}).size == 1);
  CHECK(Allowed(SamplingRule::kTopP, {.top_p = 0.5}).size == 3);   // both b (ties kept)
  CHECK(Allowed(SamplingRule::kTopP, {.top_p = 0.75}).size == 3);  // c has exactly 0.75 above: not < 0.75
  AllowedSet p76 = Allowed(SamplingRule::kTopP, {.top_p = 0.76});
  CHECK(p76.threshold == 0.125f);
  CHECK(p76.size == 4);
  CHECK(Allowed(SamplingRule::kTopP, {.top_p = 1.0}).size == 6);
  CHECK(Allowed(SamplingRule::kTopP, {.top_p = 0.0}).size == 1);  // p <= 0: the largest only
  CHECK(Allowed(SamplingRule::kTopP, {.top_p = NAN}).size == 1);
}

TEST_CASE("allowed sets: top-k then top-p over the top-k mass, min-p against the row max", "[bench]") {
  // The top-3 set {a, b, b} has mass 0.75: p = 0.6 allows b (0.375 < 0.45), p = 0.4 does not.
  CHECK(Allowed(SamplingRule::kTopKTopP, {.top_k = 3, .top_p = 0.6}).size == 3);
  CHECK(Allowed(SamplingRule::kTopKTopP, {.top_k = 3, .top_p = 0.4}).size == 1);
  CHECK(Allowed(SamplingRule::kTopKTopP, {.top_k = 5, .top_p = 1.0}).size == 5);
  CHECK(Allowed(SamplingRule::kTopKTopP, {.top_k = 0, .top_p = 0.76}).size == 4);  // no top-k: top-p alone

  AllowedSet minp = Allowed(SamplingRule::kMinP, {.min_p = 0.3});  // values >= fp32(0.3 * 0.375)
  CHECK(minp.threshold == static_cast<float>(0.3 * 0.375));
  CHECK(minp.size == 4);
  CHECK(Allowed(SamplingRule::kMinP, {.min_p = 0.5}).size == 3);  // exactly b: ties kept
  CHECK(Allowed(SamplingRule::kMinP, {.min_p = 0.0}).size == 6);
  CHECK(Allowed(SamplingRule::kMinP, {.min_p = 7.0}).size == 1);  // clamped to 1: the max only
}

TEST_CASE("draws are checked for membership, row by row", "[bench]") {
  const int64_t vocab = static_cast<int64_t>(kRow.size());
  HostTensor probs = HostTensor::Zeros(DType::kFloat32, 2 * kRow.size());
  for (size_t i = 0; i < kRow.size(); ++i) probs.Set(i, kRow[i]);  // row 1: zeros, no positive value
  const std::vector<SamplingParams> params = {{.top_k = 2}, {.top_k = 2}};
  const auto sets = AllowedSets(SamplingRule::kTopK, probs, vocab, params);
  REQUIRE(sets.size() == 2);
  CHECK(sets[0].size == 3);
  CHECK(sets[1].size == 0);
  CHECK(DescribeAllowedSets(sets) == "2 rows, allowed sets of 0..3 tokens (mean 1.5), 37.5% of the mass on average");

  HostTensor samples = HostTensor::Zeros(DType::kInt32, 2);
  for (double token : {1.0, 3.0, 4.0}) {  // a, b, b: allowed; row 1 gives 0
    samples.Set(0, token);
    CHECK(CheckSamples(samples, probs, vocab, sets).ok);
  }
  samples.Set(0, 7);  // c: outside
  Comparison bad = CheckSamples(samples, probs, vocab, sets);
  CHECK(!bad.ok);
  CHECK(bad.count == 2);
  CHECK(bad.mismatches == 1);
  CHECK(bad.first_mismatch ==
        "[row 0] token 7 (value 0.125) is outside the allowed set (values >= 0.1875: 3 tokens, 75% of the mass)");
  for (double token : {2.0, 5.0, 6.0, 9.0, -1.0}) {  // zero, negative, NaN, past the end, negative index
    INFO("token " << token);
    samples.Set(0, token);
    CHECK(!CheckSamples(samples, probs, vocab, sets).ok);
  }
  samples.Set(0, 1);
  samples.Set(1, 3);  // a row without positive values must give 0
  Comparison empty = CheckSamples(samples, probs, vocab, sets);
  CHECK(!empty.ok);
  CHECK(empty.first_mismatch == "[row 1] token 3: a row without a positive value must give 0");

  HostTensor int64_samples = HostTensor::Zeros(DType::kInt64, 2);  // int64 samples read alike
  int64_samples.Set(0, 4);
  CHECK(CheckSamples(int64_samples, probs, vocab, sets).ok);
  CHECK(!CheckSamples(HostTensor::Zeros(DType::kInt32, 1), probs, vocab, sets).ok);  // sizes differ
}

}  // namespace
}  // namespace kiln::bench
