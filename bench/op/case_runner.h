// CaseRunner: one test-list case from shape to result rows — the tensors allocated and filled
// with fresh random data, every backend run once and checked against the reference backend
// (itself checked against the routine's float64 CPU reference once per routine and dtype),
// then each passing backend timed with the L2 defeated, in rows that say how.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/op/bench_device.h"
#include "bench/op/bench_options.h"
#include "bench/op/result_row.h"
#include "bench/op/routine.h"
#include "bench/op/stream_gate.h"
#include "bench/op/test_list.h"
#include "bench/op/timer.h"

namespace kiln::bench {

struct CopyBaseline {
  double gbps = NAN;  // (read + write) bytes / median time
  double median_us = NAN;
  size_t bytes = 0;  // copied per call
  std::string mechanism;
  std::string what;  // the faster of cuMemcpyDtoDAsync and a copy kernel
  // The read-only ceiling: a kernel that only reads the same bytes (16-byte streaming loads).
  double read_gbps = NAN;  // bytes / read_us; NaN when its kernel could not be loaded
  double read_us = NAN;
};

// The bandwidths the rows are compared with: device-to-device copy, the faster of a large
// cuMemcpyDtoDAsync and a 16-byte-vector copy kernel, and a read-only kernel over the same
// bytes; timed with `timer`.
StatusOr<CopyBaseline> MeasureCopyBandwidth(const BenchDevice& device, Timer& timer);

class CaseRunner {
 public:
  // `cupti` may be null (events only); `events` is the fallback when CUPTI fails for a row.
  CaseRunner(const BenchOptions& options, const BenchDevice& device, Timer* cupti, Timer& events, CopyBaseline copy);

  std::vector<ResultRow> Run(const BenchCase& c);

  struct CheckedReference {
    Status status;       // what failed, naming the backend, routine, dtype and shape
    std::string detail;  // on success: what was compared and the largest error
    // The backend cannot run this case (Prepare said INVALID_ARGUMENT: a forced vector width
    // that does not divide the row); status says why. Not a failure of kiln-bench --check.
    bool not_applicable = false;
  };
  // One call of `backend` at `shape` on fresh random inputs, its outputs poisoned (NaN) first,
  // against the routine's float64 CPU reference (or, for draws, the allowed sets and a second
  // call that must repeat them bit for bit). kiln-bench --check runs it for every backend at
  // every Routine::CheckShapes(); the reference backend is checked so before any row uses it.
  CheckedReference CheckOnCpu(const Routine& routine, const std::string& backend, DType dtype, const ShapeAxes& shape);

 private:
  const CheckedReference& ReferenceOnCpu(const Routine& routine, DType dtype);
  StatusOr<std::vector<HostTensor>> RunOnce(const BackendFn& fn, const CaseSpec& spec,
                                            const std::vector<HostTensor>& host, const TensorSet& set);
  Status Time(const BackendFn& fn, const CaseSpec& spec, ResultRow* row);

  const BenchOptions& options_;
  const BenchDevice& device_;
  Timer* cupti_;
  Timer& events_;
  CopyBaseline copy_;
  std::map<std::string, CheckedReference> reference_checked_;  // "routine/dtype"
  // The case being run: its rotation sets of tensors in one allocation.
  DeviceMemory pool_;
  size_t set_stride_ = 0;
  std::vector<TensorSet> sets_;
  std::vector<HostTensor> pristine_;
  DeviceMemory flush_;                // --l2 flush, and rotate's fallback to it: 2x L2
  L2Mode l2_mode_ = L2Mode::kRotate;  // the case's: --l2, or flush where rotation cannot work
};

}  // namespace kiln::bench
