// CacheUpkeep: the cache's work that no request should wait for, on one thread of its own.
// Every period it writes the buffered hit counts and last-use times to the index (a warm hit
// never waits for SQLite); when a commit since the last round made an eviction due, it evicts
// least recently used entries down to the size limit instead, so the compile that crossed the
// limit returns at once (evicting thousands of entries took seconds inside that request before,
// issue 15). At the end it does both once more.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cache/artifact_cache.h"

namespace kiln::server {

class CacheUpkeep {
 public:
  // `cache` is opened with evict_in_background.
  CacheUpkeep(cache::ArtifactCache* cache, std::chrono::milliseconds period);
  ~CacheUpkeep();  // stops, evicts if due, flushes

 private:
  void Run();

  cache::ArtifactCache* cache_;
  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kiln::server
