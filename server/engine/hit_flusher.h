// HitFlusher: writes the cache's buffered hit counts and last-use times to the index every
// period, off the request path (a warm hit never waits for SQLite), and once more at the end.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cache/artifact_cache.h"

namespace kiln::server {

class HitFlusher {
 public:
  HitFlusher(cache::ArtifactCache* cache, std::chrono::milliseconds period);
  ~HitFlusher();  // stops and flushes

 private:
  cache::ArtifactCache* cache_;
  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kiln::server
