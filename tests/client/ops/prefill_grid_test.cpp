// The prefill attention entry's grid for a plan (PrefillAttentionGrid), without a GPU: the
// Hopper kernel's persistent grid (the contract's AttentionGrid) and, under the diagnostic
// control KILN_PREFILL_PERSISTENT=0 (through its testing override), a block per unit.
#include <catch2/catch.hpp>

#include <climits>

#include "client/ops/prefill/prefill_grid.h"

namespace {

using kiln::client::PrefillAttentionGrid;
using kiln::client::SetPrefillPersistentForTesting;

struct ForcePersistent {
  explicit ForcePersistent(int on) { SetPrefillPersistentForTesting(on); }
  ~ForcePersistent() { SetPrefillPersistentForTesting(-1); }
};

TEST_CASE("the Hopper prefill kernel's grid is persistent unless KILN_PREFILL_PERSISTENT is off", "[client][prefill]") {
  const int hopper = kiln::prefill::kSm90TileRows, mma = kiln::prefill::kTileRows;
  {
    const ForcePersistent on(1);
    auto g = PrefillAttentionGrid(hopper, 128, 8, 132);  // 1024 units on 132 SMs
    CHECK(g.x == 132);
    CHECK(g.y == 1);
    g = PrefillAttentionGrid(mma, 128, 8, 264);
    CHECK(g.x == 128);
    CHECK(g.y == 8);
  }
  const ForcePersistent off(0);
  auto g = PrefillAttentionGrid(hopper, 128, 8, 132);  // a block per unit
  CHECK(g.x == 1024);
  CHECK(g.y == 1);
  g = PrefillAttentionGrid(hopper, INT_MAX, 8, 132);  // the blocks take several units each
  CHECK(g.x == INT_MAX);
  g = PrefillAttentionGrid(mma, 128, 8, 264);  // the mma.sync kernel is not persistent either way
  CHECK(g.x == 128);
  CHECK(g.y == 8);
}

}  // namespace
