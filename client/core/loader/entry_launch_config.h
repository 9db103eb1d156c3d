// The launch of one op entry, built from what the entry was resolved with, in one place: the
// block and dynamic shared memory of its launch hint, and whether it launches as a programmatic
// dependent (LaunchAsDependent: its kernel waits first, on sm_90+, with KILN_PDL on). Every op
// starts its LaunchConfig here, so none can forget the last; an op that decides otherwise (its
// own block from the plan, its own dependent-launch switch) says so where it overrides a field.
#pragma once

#include "client/core/loader/launch_cache.h"
#include "client/core/loader/programmatic_launch.h"
#include "kiln/kernel.h"

namespace kiln::client {

inline LaunchConfig EntryLaunchConfig(const EntryLaunchReady& entry, Dim3 grid, void* stream) {
  LaunchConfig config;
  config.grid = grid;
  config.block.x = entry.block;
  config.dynamic_smem_bytes = entry.dynamic_smem;
  config.stream = stream;
  config.programmatic_dependent_launch = LaunchAsDependent(entry);
  return config;
}

}  // namespace kiln::client
