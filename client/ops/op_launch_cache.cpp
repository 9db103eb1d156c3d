#include "client/ops/op_launch_cache.h"

#include <mutex>

namespace kiln::client {

OpLaunchCache& OpLaunchCache::Global() {
  static auto* cache = new OpLaunchCache();  // leaked: entries are used until exit
  return *cache;
}

size_t OpLaunchCache::Hash::operator()(const OpLaunchKey& k) const {
  // FNV-1a style mixing of the fields; the table is small and lookups dominate.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(reinterpret_cast<uintptr_t>(k.context));
  mix((uint64_t{k.op} << 16) | (uint64_t{k.dtype} << 8) | k.vec);
  mix(static_cast<uint64_t>(k.size0));
  mix(static_cast<uint64_t>(k.size1));
  return static_cast<size_t>(h);
}

const OpLaunch* OpLaunchCache::Find(const OpLaunchKey& key) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

const OpLaunch* OpLaunchCache::Insert(const OpLaunchKey& key, OpLaunch launch) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  return &map_.emplace(key, std::move(launch)).first->second;
}

}  // namespace kiln::client
