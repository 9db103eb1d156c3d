// PerThreadCount (client/core/rpc/per_thread_count.h): the sum counts every bump of every
// thread, of the threads still running and of those that have exited.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "client/core/rpc/per_thread_count.h"

namespace {

using Count = kiln::client::PerThreadCount<struct PerThreadCountTestTag>;
using Other = kiln::client::PerThreadCount<struct PerThreadCountOtherTag>;

TEST_CASE("a per-thread count sums live and exited threads' bumps", "[client][counters]") {
  const uint64_t start = Count::Sum();
  for (int i = 0; i < 5; ++i) Count::Bump();
  CHECK(Count::Sum() == start + 5);

  // Threads that exit before the read.
  std::vector<std::thread> done;
  for (int t = 0; t < 8; ++t)
    done.emplace_back([t] {
      for (int i = 0; i < 1000 + t; ++i) Count::Bump();
    });
  for (std::thread& t : done) t.join();
  const uint64_t exited = 8 * 1000 + (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7);
  CHECK(Count::Sum() == start + 5 + exited);

  // Threads still running when read: their bumps so far are counted.
  std::atomic<int> bumped{0};
  std::atomic<bool> go_on{false};
  std::vector<std::thread> live;
  for (int t = 0; t < 4; ++t)
    live.emplace_back([&] {
      for (int i = 0; i < 250; ++i) Count::Bump();
      bumped.fetch_add(1);
      while (!go_on.load()) std::this_thread::yield();
    });
  while (bumped.load() < 4) std::this_thread::yield();
  CHECK(Count::Sum() == start + 5 + exited + 1000);
  go_on.store(true);
  for (std::thread& t : live) t.join();
  CHECK(Count::Sum() == start + 5 + exited + 1000);
  CHECK(Other::Sum() == 0);  // one count per tag
}

}  // namespace
