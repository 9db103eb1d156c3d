// Reads a MetricsSnapshot from the running daemon: the engine's counters (EngineStats), its
// compile scheduler, the disk cache, the tiers' rejections and the RPC latencies.
#pragma once

#include "server/engine/kernel_engine.h"
#include "server/metrics/metrics_text.h"
#include "server/metrics/rpc_latency.h"

namespace kiln::server {

// Called on each scrape; a disk cache whose totals cannot be read leaves its gauges at 0
// (logged), so the other series still reach the scraper.
MetricsSnapshot CollectMetrics(KernelEngine& engine, const RpcLatency& rpc);

}  // namespace kiln::server
