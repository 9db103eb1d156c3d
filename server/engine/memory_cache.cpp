#include "server/engine/memory_cache.h"

namespace kiln::server {

std::shared_ptr<const Artifact> MemoryCache::Get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return *it->second;
}

void MemoryCache::Put(std::shared_ptr<const Artifact> artifact) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(artifact->key); it != index_.end()) {
    bytes_ -= (*it->second)->cubin->size();
    lru_.erase(it->second);
    index_.erase(it);
  }
  bytes_ += artifact->cubin->size();
  lru_.push_front(artifact);
  index_[artifact->key] = lru_.begin();
  // Keep at least the newest entry even when it alone is over the budget.
  while (bytes_ > max_bytes_ && lru_.size() > 1) {
    const auto& victim = lru_.back();
    bytes_ -= victim->cubin->size();
    index_.erase(victim->key);
    lru_.pop_back();
  }
}

void MemoryCache::Erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return;
  bytes_ -= (*it->second)->cubin->size();
  lru_.erase(it->second);
  index_.erase(it);
}

uint64_t MemoryCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

}  // namespace kiln::server
