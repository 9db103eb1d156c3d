// Histogram: a latency distribution in fixed buckets, for the Prometheus endpoint (the renderer
// in metrics_text.h writes it as _bucket, _sum and _count). Buckets are fixed at construction so
// that scrapes over time and across daemons can be added up.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace kiln::server {

// What a scrape reads: per-bucket counts (not cumulative; one more than `bounds`, the last
// for values above every bound), their sum and their count.
struct HistogramSnapshot {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // ascending upper bounds, in seconds
  void Observe(double seconds);
  HistogramSnapshot Snapshot() const;

 private:
  // A mutex, not atomics: observations are one per RPC or compile, far from contended, and
  // a scrape then sees sum and count of the same moment.
  mutable std::mutex mu_;
  HistogramSnapshot data_;
};

// The buckets of compile times (NVRTC plus nvJitLink: a tenth of a second to a minute) and of
// RPC latencies (a hit in memory takes well under a millisecond; a compile waited on, a minute).
const std::vector<double>& CompileSecondsBuckets();
const std::vector<double>& RpcSecondsBuckets();

}  // namespace kiln::server
