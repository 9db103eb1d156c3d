// The process-wide counters behind kiln::GetClientStats (relaxed atomics: counts, not order).
// op_fast_hits, bumped by every op call, is a per-thread count instead (OpFastHits below).
#pragma once

#include <atomic>
#include <cstdint>

#include "client/core/rpc/per_thread_count.h"

namespace kiln::client {

struct ClientCounters {
  std::atomic<uint64_t> get_kernel_rpcs{0};
  std::atomic<uint64_t> rpc_failures{0};
  std::atomic<uint64_t> modules_loaded{0};
  std::atomic<uint64_t> blob_path_reads{0};
  std::atomic<uint64_t> op_fast_misses{0};
  std::atomic<uint64_t> embedded_fetches{0};
  std::atomic<uint64_t> local_fetches{0};
};

inline ClientCounters& Counters() {
  static ClientCounters counters;
  return counters;
}

inline void Bump(std::atomic<uint64_t>& counter) { counter.fetch_add(1, std::memory_order_relaxed); }

// Op calls served from the in-process launch cache (kiln::ClientStats::op_fast_hits).
using OpFastHits = PerThreadCount<struct OpFastHitsTag>;

}  // namespace kiln::client
