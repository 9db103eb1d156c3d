// ComputeTensorStats: min, max, mean, NaN and Inf counts of one tensor, computed on its GPU by
// the library's tensor_stats kernel (kernels/include/kiln/diag/tensor_stats.cuh), for API call
// logging at KILN_LOGLEVEL=5. Internal to the client: no kiln::ops API and no C ABI export
// (kernels/traces/tensor_stats.json names this header as the op's API).
#pragma once

#include <cstdint>

#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client::diag {

struct TensorStats {
  int64_t count = 0;  // elements looked at (numel)
  int64_t nan_count = 0;
  int64_t inf_count = 0;  // +Inf and -Inf
  int64_t finite_count = 0;
  double min = 0, max = 0, mean = 0;  // over the finite elements only; all 0 when finite_count == 0
};

// Runs the library's tensor_stats kernel over `t` (any layout the TensorView describes:
// strides in elements, up to kMaxTensorDims dims, any dtype of kiln::DType) on `stream` in the
// current context of t's device, copies the per-block partials back and combines them on the
// host; waits for `stream`. Refuses (INVALID_ARGUMENT, saying why) non-CUDA tensors, ndim<0,
// null data with numel>0; numel==0 gives count 0 without a launch. The caller guarantees the
// stream is not being captured into a CUDA graph.
//
// Also refused before any driver call: ndim > kMaxTensorDims, a negative size, an unknown
// dtype, a negative device ordinal, data not aligned to the element size, a numel or an
// address span beyond 2^62. A stream that is capturing is refused (FAILED_PRECONDITION) rather
// than invalidated by the synchronization. Integer tensors have no NaN or Inf; int64 values
// beyond 2^53 reach min/max/mean rounded to double. The mean is the double sum of the finite
// elements (summed in an order of the kernel's choosing) over finite_count.
StatusOr<TensorStats> ComputeTensorStats(const TensorView& t, void* stream);

}  // namespace kiln::client::diag
