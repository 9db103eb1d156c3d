// Host loops over the large tensors of a case (gigabytes of KV cache: random fills, page-table
// patterns, allowed-set sorts) spread over the machine's cores. Work is cut into fixed chunks
// whose results never depend on which thread ran them, so a case's data is the same on a
// 2-core and a 128-core machine.
#pragma once

#include <cstddef>
#include <functional>

namespace kiln::bench {

// Calls fn(chunk, begin, end) for every chunk [begin, end) of [0, count) of `chunk_size`
// elements (the last may be shorter), on up to hardware_concurrency threads; returns when all
// are done. fn must not throw and must only write what its chunk owns.
void ForEachChunk(size_t count, size_t chunk_size,
                  const std::function<void(size_t chunk, size_t begin, size_t end)>& fn);

}  // namespace kiln::bench
