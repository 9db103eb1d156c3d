// The attention entry's grid for a plan: the contract's AttentionGrid (the Hopper kernel
// persistent, a block per SM walking the units), or with the diagnostic control
// KILN_PREFILL_PERSISTENT=0 a block per unit, as the kernel ran before it was persistent: the
// same kernel then takes one unit a block, which measures what the persistence gains.
#pragma once

#include <cstdint>

#include "kiln/prefill/prefill_contract.h"

namespace kiln::client {

bool PrefillPersistentAllowed();
// 0 or 1: forced; -1: as the environment says again.
void SetPrefillPersistentForTesting(int on);

// grid.x < 2^31 and grid.y <= 65535 for any plan (items < 2^31, kv heads <= 65535).
prefill::PrefillGrid PrefillAttentionGrid(int tile_rows, int64_t num_items, int64_t num_kv_heads, int64_t slots);

}  // namespace kiln::client
