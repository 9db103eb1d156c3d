// The groups' rows of the grouped gemm routines (grouped_gemm.cpp, grouped_fp8_gemm.cpp), from
// a fixed seed drawn from the shape, so that a case's FLOPs are known before its inputs:
// contiguous, each of the t rows goes to a uniformly drawn expert (uneven counts, as routed
// tokens are), then with 3 or more groups group 1 is emptied and group 2 keeps one row; masked,
// counts uniform in 0..m_max with group 0 at 0 and the last at m_max.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kiln::bench {

// Contiguous: the rows of each of e groups for t rows in all.
inline std::vector<int64_t> ContiguousCounts(int64_t t, int64_t e) {
  std::vector<int64_t> counts(static_cast<size_t>(e), 0);
  std::mt19937_64 rng(0x6b696c6e + static_cast<uint64_t>(t) * 131 + static_cast<uint64_t>(e));
  std::uniform_int_distribution<int64_t> pick(0, e - 1);
  for (int64_t i = 0; i < t; ++i) ++counts[static_cast<size_t>(pick(rng))];
  if (e >= 3) {
    counts[0] += counts[1];
    counts[1] = 0;
    if (counts[2] > 1) {
      counts[0] += counts[2] - 1;
      counts[2] = 1;
    }
  }
  return counts;
}

// Masked: the valid rows of each of e groups of m_max.
inline std::vector<int64_t> MaskedCounts(int64_t e, int64_t m_max) {
  std::vector<int64_t> counts(static_cast<size_t>(e));
  std::mt19937_64 rng(0x6d61736b + static_cast<uint64_t>(e) * 131 + static_cast<uint64_t>(m_max));
  std::uniform_int_distribution<int64_t> pick(0, m_max);
  for (auto& c : counts) c = pick(rng);
  counts.front() = 0;
  if (e >= 2) counts.back() = m_max;
  return counts;
}

}  // namespace kiln::bench
