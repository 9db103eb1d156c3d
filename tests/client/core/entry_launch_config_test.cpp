// EntryLaunchConfig (client/core/loader/entry_launch_config.h): every op's launch starts from
// its entry's launch hint and launches as a programmatic dependent exactly when the entry may
// (its kernel waits first, on sm_90+) and KILN_PDL is on.
#include <catch2/catch.hpp>

#include "client/core/loader/entry_launch_config.h"

namespace {

using kiln::client::EntryLaunchConfig;
using kiln::client::EntryLaunchReady;
using kiln::client::OpProgrammaticLaunchSwitch;

TEST_CASE("an entry's launch config takes its hint, the grid and the stream", "[client][launch]") {
  EntryLaunchReady e;
  e.block = 256;
  e.dynamic_smem = 70000;
  e.items_per_block = 4;
  void* stream = reinterpret_cast<void*>(uintptr_t{0x5eed});
  const kiln::LaunchConfig c = EntryLaunchConfig(e, {7, 3}, stream);
  CHECK((c.grid.x == 7 && c.grid.y == 3 && c.grid.z == 1));
  CHECK((c.block.x == 256 && c.block.y == 1 && c.block.z == 1));
  CHECK(c.dynamic_smem_bytes == 70000);
  CHECK(c.stream == stream);
  CHECK((c.cluster.x == 0 && c.cluster.y == 0 && c.cluster.z == 0));
}

TEST_CASE("an entry launches as a programmatic dependent only when it may and KILN_PDL is on", "[client][launch]") {
  struct Restore {
    ~Restore() { OpProgrammaticLaunchSwitch().SetForTesting(-1); }
  } restore;
  EntryLaunchReady waits;
  waits.block = 128;
  waits.programmatic = true;
  EntryLaunchReady plain = waits;
  plain.programmatic = false;
  OpProgrammaticLaunchSwitch().SetForTesting(1);
  CHECK(EntryLaunchConfig(waits, {1}, nullptr).programmatic_dependent_launch);
  CHECK_FALSE(EntryLaunchConfig(plain, {1}, nullptr).programmatic_dependent_launch);
  OpProgrammaticLaunchSwitch().SetForTesting(0);
  CHECK_FALSE(EntryLaunchConfig(waits, {1}, nullptr).programmatic_dependent_launch);
  CHECK_FALSE(EntryLaunchConfig(plain, {1}, nullptr).programmatic_dependent_launch);
}

}  // namespace
