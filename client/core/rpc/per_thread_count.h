// PerThreadCount: a process-wide count that many threads bump on a hot path (op_fast_hits:
// every op call). Each thread adds to its own slot — a load and a store to a cache line no other
// thread writes — instead of a locked add to one line that every launching thread shares (about
// 20 cycles uncontended, a cache-line transfer between cores contended). A read sums the live
// threads' slots and what exited threads left behind. `Tag` names the count (one thread-local
// slot per Tag). Its registry is never destroyed, so a thread that exits during process exit
// still finds it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace kiln::client {

template <typename Tag>
class PerThreadCount {
 public:
  static void Bump() {
    std::atomic<uint64_t>& n = ThisThread().slot->n;
    n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // only this thread writes it
  }

  static uint64_t Sum() {
    Registry& r = Shared();
    std::lock_guard<std::mutex> lock(r.mu);
    uint64_t total = r.retired;
    for (const Slot* s : r.live) total += s->n.load(std::memory_order_relaxed);
    return total;
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> n{0};
  };
  struct Registry {
    std::mutex mu;
    std::vector<Slot*> live;
    uint64_t retired = 0;  // the counts of threads that have exited
  };
  static Registry& Shared() {
    static Registry* registry = new Registry;  // never destroyed (see above)
    return *registry;
  }
  // A thread's slot, registered on its first Bump and retired when it exits.
  struct Holder {
    Slot* slot = new Slot;
    Holder() {
      Registry& r = Shared();
      std::lock_guard<std::mutex> lock(r.mu);
      r.live.push_back(slot);
    }
    ~Holder() {
      Registry& r = Shared();
      std::lock_guard<std::mutex> lock(r.mu);
      r.retired += slot->n.load(std::memory_order_relaxed);
      r.live.erase(std::find(r.live.begin(), r.live.end(), slot));
      delete slot;
    }
    Holder(const Holder&) = delete;
    Holder& operator=(const Holder&) = delete;
  };
  static Holder& ThisThread() {
    thread_local Holder holder;
    return holder;
  }
};

}  // namespace kiln::client
