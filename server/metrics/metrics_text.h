// The Prometheus text exposition format (version 0.0.4) of kilnd's metrics. MetricsSnapshot
// holds plain numbers, read from the engine at scrape time (metrics_collect.h), so the
// rendering is tested without a daemon. Every series is listed in docs/operations.md#metrics.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/metrics/histogram.h"

namespace kiln::server {

struct MetricsSnapshot {
  std::string version;  // kiln_build_info's labels
  std::string nvrtc;
  // Hits by tier, in lookup order: memory, disk, prebuilt, repository, remote.
  std::vector<std::pair<std::string, uint64_t>> hits_by_tier;
  uint64_t misses = 0;
  uint64_t compiles = 0;
  uint64_t compile_failures = 0;
  HistogramSnapshot compile_seconds;
  int64_t jobs_queued = 0;
  int64_t jobs_running = 0;
  uint64_t memory_entries = 0;
  bool cache_enabled = true;  // false with --no-cache: the disk cache's series are left out
  uint64_t cache_entries = 0;
  uint64_t cache_bytes = 0;
  uint64_t cache_max_bytes = 0;  // 0: no limit
  uint64_t cache_evictions = 0;
  uint64_t cache_quarantined = 0;
  // Artifacts a tier offered that failed verification (checksum, key, format) and were refused.
  std::vector<std::pair<std::string, uint64_t>> rejected_by_tier;
  std::map<std::string, HistogramSnapshot> rpc_seconds;  // by full method name
};

// Content-Type of the text, for the HTTP response.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string RenderMetricsText(const MetricsSnapshot& snapshot);

// A label value as the format quotes it: backslash, double quote and newline escaped.
std::string EscapeLabelValue(const std::string& value);

}  // namespace kiln::server
