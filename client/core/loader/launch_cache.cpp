#include "client/core/loader/launch_cache.h"

namespace kiln::client {

int OpKernels::entry_count() const {
  int n = 0;
  while (n < kMaxEntries && entries[static_cast<size_t>(n)].name != nullptr) ++n;
  return n;
}

}  // namespace kiln::client
