// The refcheck of kiln-bench's sampling routines: a draw is random, so there is nothing to
// compare element by element. Instead the allowed set of every row is computed here, in
// float64 on the host, from the op's definition (kiln/ops/sampling.h), and each sampled token
// must lie in its row's set. Every sampler's set is "the tokens whose value is positive and at
// least a threshold" (ties at the threshold kept), so a set is one threshold.
//
//   top_k        the k-th largest value (k <= 0 or k >= vocab: no truncation)
//   top_p        the smallest value v with (sum of the values > v) < p * (row sum)
//   top_k_top_p  the larger of the top-k threshold and the top-p one over the top-k set's mass
//   min_p        fp32(min_p * row max), min_p clamped to [0, 1]
//
// Values are cleaned as the op reads them (negatives and NaN count as 0; zeros are never
// drawn); p >= 1 is no top-p, p <= 0 (or NaN) keeps the largest value only; a row with no
// positive value must give token 0. Pure host code (tests/bench/op/sampling_check_test.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/op/host_tensor.h"

namespace kiln::bench {

enum class SamplingRule { kTopK, kTopP, kTopKTopP, kMinP };

struct SamplingParams {
  int64_t top_k = 0;
  double top_p = 1;
  double min_p = 0;
};

// One row's allowed set: the tokens with a cleaned value > 0 and >= threshold.
struct AllowedSet {
  float threshold = 0;  // allowed: cleaned value > 0 and >= threshold
  int64_t size = 0;     // tokens in the set (0: the row has no positive value)
  double mass = 0;      // their sum
  double row_mass = 0;  // the sum of the row's cleaned values
};

AllowedSet AllowedTokens(SamplingRule rule, const float* row, int64_t vocab, const SamplingParams& params);

// Every row's set, rows spread over the cores: probs is [batch, vocab] fp32; params[b] row b's.
std::vector<AllowedSet> AllowedSets(SamplingRule rule, const HostTensor& probs, int64_t vocab,
                                    const std::vector<SamplingParams>& params);

// samples [batch] (int32 or int64): row b's token must be in allowed[b] (token 0 for a set of
// size 0). count = rows; a mismatch names the row, the token, its value and the set.
Comparison CheckSamples(const HostTensor& samples, const HostTensor& probs, int64_t vocab,
                        const std::vector<AllowedSet>& allowed);

// "128 rows, allowed sets of 1..50 tokens (mean 50.0), 61.2% of the mass on average"
std::string DescribeAllowedSets(const std::vector<AllowedSet>& allowed);

}  // namespace kiln::bench
