// OpLaunchCache: what an op call needs to launch — the function in this context and the
// launch shape — keyed by (op, dtype, sizes, vec, context) in plain integers, so a repeat call
// is one hash lookup under a shared lock: no RPC, no string, no allocation.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "client/loader/loaded_library.h"

namespace kiln::client {

struct OpLaunchKey {
  CUcontext context = nullptr;
  uint16_t op = 0;
  uint8_t dtype = 0;
  uint8_t vec = 0;
  int64_t size0 = 0;  // the op's specialization sizes (hidden, ...)
  int64_t size1 = 0;
  bool operator==(const OpLaunchKey&) const = default;
};

struct OpLaunch {
  CUfunction function = nullptr;
  unsigned block = 0;
  unsigned dynamic_smem = 0;
  int64_t rows_per_block = 1;
  int64_t cols_per_block = 0;  // activation ops: columns of a row one block covers
  std::shared_ptr<const detail::LoadedLibrary> library;  // keeps `function` loaded
};

class OpLaunchCache {
 public:
  static OpLaunchCache& Global();

  // Null on a miss. The pointer stays valid for the life of the process.
  const OpLaunch* Find(const OpLaunchKey& key) const;
  // Inserts (or keeps the entry another thread inserted first) and returns it.
  const OpLaunch* Insert(const OpLaunchKey& key, OpLaunch launch);

  struct Hash {
    size_t operator()(const OpLaunchKey& k) const;
  };

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<OpLaunchKey, OpLaunch, Hash> map_;  // node-based: entries never move
};

// A thread's memo of launches it has found in OpLaunchCache::Global(): direct-mapped, 8 slots,
// no lock, no atomic. A repeat call on the same thread then skips the shared lock and the
// table lookup (about 50 ns of the op-call overhead, docs/benchmarking.md). Safe because
// the global cache never erases or moves an entry: a remembered pointer stays valid.
class OpLaunchMemo {
 public:
  const OpLaunch* Find(const OpLaunchKey& key) const {
    const Slot& slot = slots_[Index(key)];
    return slot.launch != nullptr && slot.key == key ? slot.launch : nullptr;
  }
  void Remember(const OpLaunchKey& key, const OpLaunch* launch) { slots_[Index(key)] = {key, launch}; }

 private:
  static constexpr size_t kSlots = 8;
  static size_t Index(const OpLaunchKey& key) { return OpLaunchCache::Hash{}(key) % kSlots; }
  struct Slot {
    OpLaunchKey key;
    const OpLaunch* launch = nullptr;
  };
  Slot slots_[kSlots];
};

}  // namespace kiln::client
