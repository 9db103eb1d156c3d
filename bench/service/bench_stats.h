// Summary statistics of a timing sample: median, percentiles, spread.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::bench {

struct Summary {
  size_t n = 0;
  double min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0, stdev = 0;
};

Summary Summarize(std::vector<double> values);
nlohmann::json ToJson(const Summary& s, const std::string& unit);

}  // namespace kiln::bench
