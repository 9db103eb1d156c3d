// The op-call overhead benchmark (kiln-bench --overhead): how much host time one kiln::ops
// call costs beyond launching its kernel by hand. The diagnostics' target: with logging off,
// an op call is within 0.2 us of a raw cuLaunchKernelEx of the same kernel.
//
// For each tiny case (silu_and_mul bf16 1 x d=8; rms_norm bf16 1 x 128: the kernel's device
// time is not the question), three ways to enqueue the same launch on one stream:
//
//   kiln                  the op: kiln::ops::silu_and_mul(out, input, stream), ...
//   raw_cuLaunchKernelEx  cuLaunchKernelEx of the CUfunction the op launches (from the op's
//                         in-process launch cache), with the same grid, block, shared memory
//                         and arguments, its CUlaunchConfig and argument array built once
//   kiln_Kernel_Launch    kiln::Kernel::Launch of the same kernel fetched through the public
//                         raw-kernel API (kiln::LoadOp with the op's name and params)
//
// The public fetch must give the module the op uses (ModuleInfo.uri and cache key equal), and
// both hand-made launches must write the op's output bit for bit, before anything is timed.
// Timing: host wall time (steady_clock) around each call, in batches of 1000 calls back to
// back on the stream, a stream synchronize between batches (not timed) so the launch queue
// never fills; the backends take turns batch by batch. Rows give the median per call and, in
// overhead_us, its difference from the raw launch's median.
#pragma once

#include <vector>

#include "bench/op/bench_device.h"
#include "bench/op/bench_options.h"
#include "bench/op/result_row.h"

namespace kiln::bench {

inline constexpr int kOverheadCallsPerBatch = 1000;

// `options.iters` timed batches per backend, after `options.warmup` untimed ones. A case that
// cannot be set up or checked gives error / refcheck_failed rows naming why.
std::vector<ResultRow> MeasureCallOverhead(const BenchOptions& options, const BenchDevice& device);

// The API-logging switch the diagnostics read, as set in this process's environment:
// "KILN_LOGLEVEL unset" or "KILN_LOGLEVEL=3" (the target holds with logging off).
std::string LoggingState();

}  // namespace kiln::bench
