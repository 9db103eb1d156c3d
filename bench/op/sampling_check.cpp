#include "bench/op/sampling_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "bench/op/host_parallel.h"

namespace kiln::bench {
namespace {

float Clean(float x) { return x > 0.0f ? x : 0.0f; }  // NaN > 0 is false: NaN counts as 0

// The smallest group value v (walking the distinct values from the largest down) whose mass
// above, sum of the values > v, is < limit: the top-p threshold. `desc` holds the positive
// values in descending order; only the first `n` take part.
float TopPThreshold(const std::vector<float>& desc, size_t n, double limit) {
  double above = 0;
  float threshold = desc[0];
  for (size_t i = 0; i < n;) {
    const float g = desc[i];
    if (!(above < limit)) break;
    threshold = g;
    for (; i < n && desc[i] == g; ++i) above += g;
  }
  return threshold;
}

}  // namespace

AllowedSet AllowedTokens(SamplingRule rule, const float* row, int64_t vocab, const SamplingParams& params) {
  std::vector<float> desc;
  desc.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    if (Clean(row[i]) > 0) desc.push_back(row[i]);
  AllowedSet set;
  if (desc.empty()) return set;  // no positive value: token 0
  std::sort(desc.begin(), desc.end(), std::greater<float>());
  // Sums from the smallest value up: the rounding of the small ones is not lost.
  for (auto it = desc.rbegin(); it != desc.rend(); ++it) set.row_mass += *it;
  const size_t positive = desc.size();

  float threshold = desc.back();  // no truncation: every positive value
  auto top_k = [&]() -> size_t {  // how many of desc are in the top-k set (ties kept)
    const int64_t k = params.top_k;
    if (k <= 0 || k >= vocab || static_cast<size_t>(k) >= positive) return positive;
    const float kth = desc[static_cast<size_t>(k - 1)];
    size_t n = static_cast<size_t>(k);
    while (n < positive && desc[n] == kth) ++n;
    return n;
  };
  auto top_p = [&](size_t n, double mass) -> float {
    const double p = params.top_p;
    if (std::isnan(p) || p <= 0) return desc[0];  // the largest value only
    if (p >= 1) return desc[n - 1];
    return TopPThreshold(desc, n, p * mass);
  };
  switch (rule) {
    case SamplingRule::kTopK: threshold = desc[top_k() - 1]; break;
    case SamplingRule::kTopP: threshold = top_p(positive, set.row_mass); break;
    case SamplingRule::kTopKTopP: {
      const size_t n = top_k();
      double mass_k = 0;
      for (size_t i = n; i-- > 0;) mass_k += desc[i];
      threshold = top_p(n, mass_k);
      break;
    }
    case SamplingRule::kMinP: {
      double m = params.min_p;
      m = std::isnan(m) ? 0.0 : std::clamp(m, 0.0, 1.0);
      // The product of two floats is exact in double: one rounding to fp32, as the op's.
      threshold = std::max(static_cast<float>(m * static_cast<double>(desc[0])), desc.back());
      break;
    }
  }
  set.threshold = threshold;
  for (size_t i = positive; i-- > 0;) {
    if (desc[i] < threshold) continue;
    ++set.size;
    set.mass += desc[i];
  }
  return set;
}

std::vector<AllowedSet> AllowedSets(SamplingRule rule, const HostTensor& probs, int64_t vocab,
                                    const std::vector<SamplingParams>& params) {
  std::vector<AllowedSet> sets(params.size());
  const float* data = reinterpret_cast<const float*>(probs.bytes.data());
  ForEachChunk(params.size(), 1, [&](size_t b, size_t, size_t) {
    sets[b] = AllowedTokens(rule, data + b * static_cast<size_t>(vocab), vocab, params[b]);
  });
  return sets;
}

Comparison CheckSamples(const HostTensor& samples, const HostTensor& probs, int64_t vocab,
                        const std::vector<AllowedSet>& allowed) {
  Comparison c;
  c.count = allowed.size();
  if (samples.size() != allowed.size() || probs.dtype != DType::kFloat32 ||
      probs.size() != allowed.size() * static_cast<size_t>(vocab)) {
    c.ok = false;
    c.mismatches = c.count;
    c.first_mismatch = "sizes differ: " + std::to_string(samples.size()) + " samples, " +
                       std::to_string(allowed.size()) + " rows of " + std::to_string(vocab) + " fp32 values";
    return c;
  }
  const float* data = reinterpret_cast<const float*>(probs.bytes.data());
  for (size_t b = 0; b < allowed.size(); ++b) {
    const AllowedSet& set = allowed[b];
    const double token = samples.Get(b);
    std::ostringstream why;
    why.precision(7);
    if (set.size == 0) {
      if (token == 0) continue;
      why << "[row " << b << "] token " << token << ": a row without a positive value must give 0";
    } else if (!(token >= 0 && token < static_cast<double>(vocab))) {
      why << "[row " << b << "] token " << token << " is outside [0, " << vocab << ")";
    } else {
      const float v = Clean(data[b * static_cast<size_t>(vocab) + static_cast<size_t>(token)]);
      if (v > 0 && v >= set.threshold) continue;
      why << "[row " << b << "] token " << static_cast<int64_t>(token) << " (value " << v
          << ") is outside the allowed set (values >= " << set.threshold << ": " << set.size << " tokens, "
          << 100.0 * set.mass / set.row_mass << "% of the mass)";
    }
    if (c.mismatches++ == 0) c.first_mismatch = why.str();
  }
  c.ok = c.mismatches == 0;
  c.worst_fraction = c.ok ? 0.0 : HUGE_VAL;
  return c;
}

std::string DescribeAllowedSets(const std::vector<AllowedSet>& allowed) {
  if (allowed.empty()) return "no rows";
  int64_t lo = allowed[0].size, hi = allowed[0].size;
  double sizes = 0, share = 0;
  for (const auto& s : allowed) {
    lo = std::min(lo, s.size);
    hi = std::max(hi, s.size);
    sizes += static_cast<double>(s.size);
    share += s.row_mass > 0 ? s.mass / s.row_mass : 0.0;
  }
  const double n = static_cast<double>(allowed.size());
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "%zu rows, allowed sets of %lld..%lld tokens (mean %.1f), %.1f%% of the mass on average",
                allowed.size(), static_cast<long long>(lo), static_cast<long long>(hi), sizes / n, 100.0 * share / n);
  return buf;
}

}  // namespace kiln::bench
