// The launch cache: what an op call needs to launch — each entry's function in this context
// and its launch shape — keyed by the op, its specialization and the context. A specialization
// is the op's own small struct of named fields (norm: dtype, hidden, vec), so keys of different
// ops never collide and nothing is packed by hand. A repeat call is a lookup in the calling
// thread's memo (no lock), else one hash lookup under a shared lock: no RPC, no string, no
// allocation.
#pragma once

#include <cuda.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <tuple>
#include <unordered_map>

#include "client/core/loader/loaded_library.h"

namespace kiln::client {

// What the loader must know of an op to fetch and launch it: the daemon's op name and the
// entries its launches use, in the order the op indexes them (OpLaunch::entries).
struct OpKernels {
  static constexpr int kMaxEntries = 6;
  // Written with designated initializers ({.name = ..., .min_block = 256, .waits_first = true}):
  // two positional booleans read easily as each other.
  struct Entry {
    const char* name = nullptr;
    int min_block = 1;                  // the smallest block the op's launch accepts
    bool uses_items_per_block = false;  // the launch divides by its items_per_block (so >= 1)
    // The kernel waits (GridDependencyWait) before its first global memory access, so it may
    // launch as a programmatic dependent (client/core/loader/programmatic_launch.h).
    bool waits_first = false;
  };
  const char* op = nullptr;  // "rmsnorm"
  std::array<Entry, kMaxEntries> entries = {};
  int entry_count() const;
};

// One entry of a loaded module, resolved in one context.
struct EntryLaunchReady {
  CUfunction function = nullptr;
  unsigned block = 0;
  unsigned dynamic_smem = 0;
  int64_t items_per_block = 0;
  int64_t max_blocks = 0;     // 0: no cap
  bool programmatic = false;  // waits_first, on a device with griddepcontrol (sm_90+)
};

// The entries of one op specialization in one context, in OpKernels order.
struct OpLaunch {
  std::array<EntryLaunchReady, OpKernels::kMaxEntries> entries = {};
  std::shared_ptr<const detail::LoadedLibrary> library;  // keeps the functions loaded
  const EntryLaunchReady& entry(int i = 0) const { return entries[static_cast<size_t>(i)]; }
};

// A specialization's fields as one hash (Spec::Fields() returns a std::tie of them).
template <typename Spec>
size_t HashSpec(const Spec& spec) {
  size_t h = 1469598103934665603ull;  // FNV-1a style mixing of each field's std::hash
  std::apply(
      [&h](const auto&... field) {
        ((h = (h ^ std::hash<std::decay_t<decltype(field)>>{}(field)) * 1099511628211ull), ...);
      },
      spec.Fields());
  return h;
}

template <typename Spec>
struct OpLaunchKey {
  CUcontext context = nullptr;
  const OpKernels* op = nullptr;  // the op itself: its address is its identity
  Spec spec{};
  bool operator==(const OpLaunchKey&) const = default;
  struct Hash {
    size_t operator()(const OpLaunchKey& k) const {
      return HashSpec(k.spec) ^ (std::hash<const void*>{}(k.context) * 31) ^ std::hash<const void*>{}(k.op);
    }
  };
};

// The process-wide cache of one specialization type. Entries are never erased or moved, so a
// pointer to one stays valid for the life of the process.
template <typename Spec>
class LaunchCache {
 public:
  using Key = OpLaunchKey<Spec>;
  static LaunchCache& Global() {
    static auto* cache = new LaunchCache();  // leaked: entries are used until exit
    return *cache;
  }
  const OpLaunch* Find(const Key& key) const {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }
  // Inserts (or keeps the entry another thread inserted first) and returns it.
  const OpLaunch* Insert(const Key& key, OpLaunch launch) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    return &map_.emplace(key, std::move(launch)).first->second;
  }

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<Key, OpLaunch, typename Key::Hash> map_;  // node-based: entries never move
};

// A thread's memo of launches it found in LaunchCache<Spec>::Global(): direct-mapped, 8 slots,
// no lock, no atomic. A repeat call on the same thread then skips the shared lock and the
// table lookup (about 50 ns of the op-call overhead, docs/benchmarking.md).
template <typename Spec>
class LaunchMemo {
 public:
  using Key = OpLaunchKey<Spec>;
  const OpLaunch* Find(const Key& key) const {
    const Slot& slot = slots_[Index(key)];
    return slot.launch != nullptr && slot.key == key ? slot.launch : nullptr;
  }
  void Remember(const Key& key, const OpLaunch* launch) { slots_[Index(key)] = {key, launch}; }

 private:
  static constexpr size_t kSlots = 8;
  static size_t Index(const Key& key) { return typename Key::Hash{}(key) % kSlots; }
  struct Slot {
    Key key;
    const OpLaunch* launch = nullptr;
  };
  Slot slots_[kSlots];
};

}  // namespace kiln::client
