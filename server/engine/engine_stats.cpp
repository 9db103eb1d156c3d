#include "server/engine/engine_stats.h"

#include <algorithm>
#include <vector>

namespace kiln::server {

void EngineStats::RecordHitLatency(double us) {
  std::lock_guard<std::mutex> lock(mu_);
  ring_[count_ % kWindow] = us;
  ++count_;
}

EngineStats::Percentiles EngineStats::HitLatency() const {
  std::vector<double> values;
  {
    std::lock_guard<std::mutex> lock(mu_);
    values.assign(ring_.begin(), ring_.begin() + std::min(count_, kWindow));
  }
  Percentiles p;
  if (values.empty()) return p;
  std::sort(values.begin(), values.end());
  auto at = [&](double q) { return values[std::min(values.size() - 1, size_t(q * values.size()))]; };
  p.p50_us = at(0.50);
  p.p99_us = at(0.99);
  return p;
}

}  // namespace kiln::server
