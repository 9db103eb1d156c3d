#include "bench/op/timing_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kiln::bench {

TimingStats SummarizeTimes(std::vector<double> v) {
  TimingStats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  s.median = v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  s.min = v.front();
  s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double squares = 0;
  for (double x : v) squares += (x - s.mean) * (x - s.mean);
  s.std = v.size() > 1 ? std::sqrt(squares / static_cast<double>(v.size() - 1)) : 0.0;
  return s;
}

}  // namespace kiln::bench
