// Timer: how kiln-bench measures device time per call, and which mechanism did (each row
// records it). Both timers run the calls in batches behind a StreamGate, so the GPU executes
// them back to back; work `between` calls (the L2 flush) is outside the measurement.
//
//   cupti_activity  CUPTI's kernel/memcpy/memset activity records: start and end of the
//                   device work itself, grouped per call by external correlation ids; a call
//                   of several kernels spans the first start to the last end.
//   cupti_activity also gives the batch's span per call (TimedRun::stream_us), the figure that
//                   shows what launching as a programmatic dependent saves: a plain launch's
//                   per-call time excludes the gap before it, a dependent's includes its wait.
//   cuda_events     cuEventRecord before and after each call, cuEventElapsedTime: includes
//                   the front-end latency of a launch (about a microsecond), so small kernels
//                   read a little slower than under CUPTI.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/op/bench_device.h"
#include "bench/op/stream_gate.h"
#include "kiln/status.h"

namespace kiln::bench {

struct TimedRun {
  std::vector<double> us;  // per call, in call order
  // The stream's time per call: each gated batch's first device start to its last end, summed
  // and divided by the calls (launch gaps, waits and work `between` calls included): what a
  // sequence of these calls costs on one stream. NaN where the mechanism cannot tell.
  double stream_us = NAN;
  std::string kernels;  // the kernels timed, when the mechanism names them
  // Each kernel's median time and the gap before it, for calls of several kernels (CUPTI
  // only; kernel_parts.h).
  std::string kernel_parts;
  std::string warning;  // e.g. a gate that timed out (launch gaps may be in the times)
};

class Timer {
 public:
  virtual ~Timer() = default;
  virtual const char* mechanism() const = 0;
  // Calls between(i) (not measured) then call(i) (measured) for i in [0, iterations).
  virtual StatusOr<TimedRun> Measure(int iterations, const std::function<Status(int)>& between,
                                     const std::function<Status(int)>& call) = 0;
};

std::unique_ptr<Timer> MakeEventTimer(const BenchDevice& device, StreamGate& gate);

// CUPTI's activity API, started once per process before the CUDA context exists:
// libcupti is dlopen'ed (KILN_BENCH_CUPTI, then libcupti.so.13 on the library path, then
// /usr/local/cuda/extras/CUPTI/lib64 and /usr/local/cuda/lib64) and never linked, so
// kiln-bench runs where there is none. UNAVAILABLE says why it cannot be used (not found,
// another major version, built without CUPTI headers, a CUPTI call failing).
Status StartCupti();
StatusOr<std::unique_ptr<Timer>> MakeCuptiTimer(const BenchDevice& device, StreamGate& gate);

}  // namespace kiln::bench
