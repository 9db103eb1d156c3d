// EngineStats: counters since the daemon started, and the daemon-side latency of recent
// cache hits (a ring of the last 4096) for GetStats.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "server/metrics/histogram.h"

namespace kiln::server {

class EngineStats {
 public:
  std::atomic<uint64_t> memory_hits{0};
  std::atomic<uint64_t> disk_hits{0};
  std::atomic<uint64_t> prebuilt_hits{0};
  std::atomic<uint64_t> repository_hits{0};
  std::atomic<uint64_t> remote_hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> compiles{0};
  std::atomic<uint64_t> compile_failures{0};
  // Successful compiles' NVRTC plus nvJitLink time, for the metrics endpoint.
  Histogram compile_seconds{CompileSecondsBuckets()};

  void RecordHitLatency(double us);
  struct Percentiles {
    double p50_us = 0;
    double p99_us = 0;
  };
  Percentiles HitLatency() const;

 private:
  static constexpr size_t kWindow = 4096;
  mutable std::mutex mu_;
  std::array<double, kWindow> ring_{};
  size_t count_ = 0;
};

}  // namespace kiln::server
