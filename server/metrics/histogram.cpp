#include "server/metrics/histogram.h"

#include <algorithm>

namespace kiln::server {

Histogram::Histogram(std::vector<double> bounds) {
  data_.bounds = std::move(bounds);
  data_.counts.assign(data_.bounds.size() + 1, 0);
}

void Histogram::Observe(double seconds) {
  // Prometheus buckets are "less than or equal": a value on a bound counts in that bucket.
  size_t i = std::lower_bound(data_.bounds.begin(), data_.bounds.end(), seconds) - data_.bounds.begin();
  std::lock_guard<std::mutex> lock(mu_);
  data_.counts[i]++;
  data_.sum += seconds;
  data_.count++;
}

HistogramSnapshot Histogram::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_;
}

const std::vector<double>& CompileSecondsBuckets() {
  static const std::vector<double> buckets = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
  return buckets;
}

const std::vector<double>& RpcSecondsBuckets() {
  static const std::vector<double> buckets = {0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60};
  return buckets;
}

}  // namespace kiln::server
