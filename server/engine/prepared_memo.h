// PreparedMemo: request → its prepared spec and cache key, for as long as the kernels tree
// does not change. Turning a request into a spec and a key is deterministic (op generator or
// raw-source policy, then SHA-256 over the sources), but for a large raw source it costs more
// than the rest of a warm hit together; a repeat request skips it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/engine/compile_flight.h"

namespace kiln::server {

struct KernelQuery;

class PreparedMemo {
 public:
  explicit PreparedMemo(uint64_t max_bytes = 64ull << 20) : max_bytes_(max_bytes) {}

  // Everything Prepare reads from a query, length-prefixed: equal fingerprints, equal requests.
  static std::string Fingerprint(const KernelQuery& query);

  // The memoized preparation, when it was made from the same tree generation.
  std::shared_ptr<const PreparedRequest> Get(const std::string& fingerprint, uint64_t tree_generation);
  void Put(const std::string& fingerprint, std::shared_ptr<const PreparedRequest> prepared);

 private:
  struct Entry {
    std::string fingerprint;
    std::shared_ptr<const PreparedRequest> prepared;
    uint64_t bytes = 0;
  };
  using Lru = std::list<Entry>;
  const uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  std::mutex mu_;
  Lru lru_;  // front: most recently used
  std::unordered_map<std::string, Lru::iterator> index_;
};

}  // namespace kiln::server
