// Programmatic dependent launch from the host side: which launches are made as programmatic
// dependents (LaunchConfig::programmatic_dependent_launch), and the process-wide controls that
// turn it on or off. A kernel may be launched so only if it waits (kiln/common/
// grid_dependency.cuh: GridDependencyWait) before its first global memory access; the op says
// so per entry (OpKernels::Entry::waits_first), and the launch is prepared as programmatic
// where that holds and the device has griddepcontrol (sm_90+: EntryLaunchReady::programmatic).
#pragma once

#include <atomic>

#include "client/core/loader/launch_cache.h"

namespace kiln::client {

// An on/off control read once per process from an environment variable ("0" or "1"), which
// tests may override. A value that turns it away from its default is said once on stderr
// ("kiln: VAR=V: <note>"); any other value is reported and the default used.
class BinarySwitch {
 public:
  constexpr BinarySwitch(const char* variable, bool default_on, const char* note)
      : variable_(variable), default_on_(default_on), note_(note) {}
  BinarySwitch(const BinarySwitch&) = delete;
  BinarySwitch& operator=(const BinarySwitch&) = delete;

  bool On() const;
  // 0 or 1: forced; -1: as the environment says again.
  void SetForTesting(int on) { forced_.store(on, std::memory_order_relaxed); }
  const char* variable() const { return variable_; }

 private:
  bool FromEnvironment() const;

  const char* variable_;
  bool default_on_;
  const char* note_;
  std::atomic<int> forced_{-1};
  mutable std::atomic<int> read_{-1};  // the environment's answer once read
};

// KILN_PDL (default 1): the ops whose entries wait first (the norm, activation, RoPE, KV append,
// decode and sampling ops) launch as programmatic dependents on sm_90+.
BinarySwitch& OpProgrammaticLaunchSwitch();

// Whether a launch of `entry` is made as a programmatic dependent: its kernel waits first on this
// device, and KILN_PDL is on.
inline bool LaunchAsDependent(const EntryLaunchReady& entry) {
  return entry.programmatic && OpProgrammaticLaunchSwitch().On();
}

}  // namespace kiln::client
