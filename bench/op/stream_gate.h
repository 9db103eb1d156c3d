// StreamGate: holds a stream still while the host enqueues a batch of timed calls, then lets
// it run them back to back. Without it, a call shorter than its own launch overhead leaves the
// GPU idle between calls, and events around it would time the host's launch gap instead of
// the kernel. The gate is one thread spinning on a host-mapped word (with a timeout, so a
// host that never opens it cannot hang the GPU); it is compiled by kilnd like every kernel.
#pragma once

#include <memory>

#include "bench/op/bench_device.h"
#include "kiln/kernel.h"
#include "kiln/status.h"

namespace kiln::bench {

class StreamGate {
 public:
  static StatusOr<std::unique_ptr<StreamGate>> Create(const BenchDevice& device);

  // Enqueues the closed gate on the device's stream.
  Status Close();
  // Opens it (host write); the stream runs what was enqueued after Close().
  void Open();
  // Whether the last gate gave up waiting (its timeout passed before Open): the batch then ran
  // as it was enqueued, and launch gaps may be in its times.
  bool TimedOut() const;

 private:
  const BenchDevice* device_ = nullptr;
  std::unique_ptr<HostMappedWords> words_;  // [0] open, [1] timed out
  Kernel kernel_;
};

// The largest batch enqueued behind one gate: well inside what a stream's command queue holds
// without blocking the host (which would deadlock until the gate's timeout).
inline constexpr int kMaxGatedCalls = 128;

}  // namespace kiln::bench
