// MemoryCache: the daemon's in-process map of cache key → artifact, least recently used
// entries dropped beyond a byte budget. A hit costs one hash lookup under a mutex.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/engine/artifact.h"

namespace kiln::server {

class MemoryCache {
 public:
  explicit MemoryCache(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  std::shared_ptr<const Artifact> Get(const std::string& key);
  void Put(std::shared_ptr<const Artifact> artifact);
  void Erase(const std::string& key);
  uint64_t size() const;

 private:
  using Lru = std::list<std::shared_ptr<const Artifact>>;
  uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  mutable std::mutex mu_;
  Lru lru_;  // front: most recently used
  std::unordered_map<std::string, Lru::iterator> index_;
};

}  // namespace kiln::server
