#include "server/engine/cache_upkeep.h"

#include <spdlog/spdlog.h>

namespace kiln::server {

CacheUpkeep::CacheUpkeep(cache::ArtifactCache* cache, std::chrono::milliseconds period)
    : cache_(cache), period_(period) {
  thread_ = std::thread([this] { Run(); });
}

CacheUpkeep::~CacheUpkeep() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // A commit after the thread's last round: its eviction is still due.
  if (auto keep = cache_->TakeDueEviction()) (void)cache_->EnforceSizeLimit(*keep);
  (void)cache_->FlushHits();
}

void CacheUpkeep::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, period_, [&] { return stop_; });
    lock.unlock();
    if (auto keep = cache_->TakeDueEviction()) {
      // EnforceSizeLimit flushes the hits first (they decide what is least recently used).
      auto evicted = cache_->EnforceSizeLimit(*keep);
      if (!evicted.ok()) {
        spdlog::warn("could not evict to the cache size limit (retried after the next commit): {}",
                     evicted.status().ToString());
      } else if (!evicted->evicted.empty()) {
        spdlog::info("evicted {} least recently used cache entries ({} bytes) to stay under the size limit",
                     evicted->evicted.size(), evicted->bytes_freed);
      }
    } else if (auto s = cache_->FlushHits(); !s.ok()) {
      spdlog::warn("could not record cache hits: {}", s.ToString());
    }
    lock.lock();
  }
}

}  // namespace kiln::server
