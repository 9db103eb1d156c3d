#include "server/engine/hit_flusher.h"

#include <spdlog/spdlog.h>

namespace kiln::server {

HitFlusher::HitFlusher(cache::ArtifactCache* cache, std::chrono::milliseconds period) : cache_(cache), period_(period) {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, period_, [&] { return stop_; });
      lock.unlock();
      if (auto s = cache_->FlushHits(); !s.ok()) spdlog::warn("could not record cache hits: {}", s.ToString());
      lock.lock();
    }
  });
}

HitFlusher::~HitFlusher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace kiln::server
