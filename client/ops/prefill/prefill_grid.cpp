#include "client/ops/prefill/prefill_grid.h"

#include <algorithm>
#include <climits>

#include "client/core/api/binary_switch.h"

namespace kiln::client {
namespace {

BinarySwitch& PersistentSwitch() {
  // A diagnostic control (docs/diagnostic-controls.md).
  static BinarySwitch s("KILN_PREFILL_PERSISTENT", true,
                        "the Hopper prefill kernel runs a block per unit, not persistent blocks, in this process (a "
                        "diagnostic control; docs/kernels-prefill.md)");
  return s;
}

}  // namespace

bool PrefillPersistentAllowed() { return PersistentSwitch().On(); }

void SetPrefillPersistentForTesting(int on) { PersistentSwitch().SetForTesting(on < 0 ? -1 : on != 0 ? 1 : 0); }

prefill::PrefillGrid PrefillAttentionGrid(int tile_rows, int64_t num_items, int64_t num_kv_heads, int64_t slots) {
  if (prefill::UsesSm90Kernel(tile_rows) && !PrefillPersistentAllowed()) {
    // A block per unit; past 2^31 - 1 units the blocks take several each (the kernel's loop).
    return {std::min<int64_t>(num_items * num_kv_heads, INT_MAX), 1};
  }
  return prefill::AttentionGrid(tile_rows, num_items, num_kv_heads, slots);
}

}  // namespace kiln::client
