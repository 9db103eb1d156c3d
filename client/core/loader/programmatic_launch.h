// Programmatic dependent launch from the host side: which launches are made as programmatic
// dependents (LaunchConfig::programmatic_dependent_launch), and the process-wide controls that
// turn it on or off. A kernel may be launched so only if it waits (kiln/common/
// grid_dependency.cuh: GridDependencyWait) before its first global memory access; the op says
// so per entry (OpKernels::Entry::waits_first), and the launch is prepared as programmatic
// where that holds and the device has griddepcontrol (sm_90+: EntryLaunchReady::programmatic).
#pragma once

#include "client/core/api/binary_switch.h"
#include "client/core/loader/launch_cache.h"

namespace kiln::client {

// KILN_PDL (default 1): the ops whose entries wait first (the norm, activation, RoPE, KV append,
// decode and sampling ops) launch as programmatic dependents on sm_90+.
BinarySwitch& OpProgrammaticLaunchSwitch();

// Whether a launch of `entry` is made as a programmatic dependent: its kernel waits first on this
// device, and KILN_PDL is on.
inline bool LaunchAsDependent(const EntryLaunchReady& entry) {
  return entry.programmatic && OpProgrammaticLaunchSwitch().On();
}

}  // namespace kiln::client
