#include "server/metrics/metrics_collect.h"

#include <spdlog/spdlog.h>

#include "server/tiers/artifact_repository.h"
#include "server/tiers/prebuilt_bundles.h"
#include "server/tiers/remote_cache.h"

namespace kiln::server {

MetricsSnapshot CollectMetrics(KernelEngine& engine, const RpcLatency& rpc) {
  MetricsSnapshot s;
  const auto& tc = engine.toolchain();
  s.version = tc.kiln;
  s.nvrtc = tc.nvrtc;
  auto& stats = engine.stats();
  s.hits_by_tier = {{"memory", stats.memory_hits},
                    {"disk", stats.disk_hits},
                    {"prebuilt", stats.prebuilt_hits},
                    {"repository", stats.repository_hits},
                    {"remote", stats.remote_hits}};
  s.misses = stats.misses;
  s.compiles = stats.compiles;
  s.compile_failures = stats.compile_failures;
  s.compile_seconds = stats.compile_seconds.Snapshot();
  s.jobs_queued = engine.scheduler().queued();
  s.jobs_running = engine.scheduler().running();
  s.memory_entries = engine.memory().size();
  s.cache_enabled = engine.cache() != nullptr;
  if (auto* cache = engine.cache()) {
    auto totals = cache->index().GetTotals();
    if (totals.ok()) {
      s.cache_entries = totals->entries;
      s.cache_bytes = totals->bytes;
    } else {
      spdlog::warn("metrics: the cache index's totals could not be read: {}", std::string(totals.status().message()));
    }
    s.cache_max_bytes = cache->options().max_bytes;
    s.cache_evictions = cache->evictions();
    s.cache_quarantined = cache->quarantined();
  }
  // Only the tiers this daemon was started with.
  if (const auto* prebuilt = engine.prebuilt()) s.rejected_by_tier.emplace_back("prebuilt", prebuilt->rejected());
  if (const auto* repository = engine.repository())
    s.rejected_by_tier.emplace_back("repository", repository->rejected());
  if (const auto* remote = engine.remote()) s.rejected_by_tier.emplace_back("remote", remote->rejected());
  s.rpc_seconds = rpc.Snapshot();
  return s;
}

}  // namespace kiln::server
