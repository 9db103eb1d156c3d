#include "bench/service/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kiln::bench {

Summary Summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * double(v.size())))]; };
  s.min = v.front();
  s.max = v.back();
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double var = 0;
  for (double x : v) var += (x - s.mean) * (x - s.mean);
  s.stdev = v.size() > 1 ? std::sqrt(var / double(v.size() - 1)) : 0.0;
  return s;
}

nlohmann::json ToJson(const Summary& s, const std::string& unit) {
  return {{"unit", unit}, {"n", s.n},     {"min", s.min},   {"p50", s.p50},    {"p90", s.p90},
          {"p99", s.p99}, {"max", s.max}, {"mean", s.mean}, {"stdev", s.stdev}};
}

}  // namespace kiln::bench
