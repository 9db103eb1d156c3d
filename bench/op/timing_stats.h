// TimingStats: what a row reports about its per-iteration times — the median (the figure),
// the sample standard deviation and min/max (the spread), and the count.
#pragma once

#include <cstddef>
#include <vector>

namespace kiln::bench {

struct TimingStats {
  size_t n = 0;
  double median = 0;  // the mean of the two middle values for an even count
  double mean = 0;
  double std = 0;  // sample standard deviation (n - 1); 0 for fewer than two samples
  double min = 0;
  double max = 0;
};

TimingStats SummarizeTimes(std::vector<double> samples);

}  // namespace kiln::bench
