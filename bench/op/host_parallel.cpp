#include "bench/op/host_parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace kiln::bench {

void ForEachChunk(size_t count, size_t chunk_size, const std::function<void(size_t, size_t, size_t)>& fn) {
  if (count == 0) return;
  chunk_size = std::max<size_t>(chunk_size, 1);
  const size_t chunks = (count + chunk_size - 1) / chunk_size;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t c = next++; c < chunks; c = next++) fn(c, c * chunk_size, std::min(count, (c + 1) * chunk_size));
  };
  // Threads only where there is more than one chunk: small tensors stay on the caller.
  const size_t threads = std::min<size_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace kiln::bench
