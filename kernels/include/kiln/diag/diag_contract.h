// The op contract of the diagnostics family (kiln/common/op_contract.h says what a contract
// is): tensor_stats, the statistics of one tensor that API call logging takes at
// KILN_LOGLEVEL=5 (NaN, Inf and finite counts, min, max and the sum of the finite elements).
//
// Params: dtype (any TensorView dtype). The shape and strides are launch arguments.
// Launch: grid.x = min(ceil(numel / block), max_blocks), block as hinted, no dynamic shared
// memory; `partials` holds grid.x records, one per block (no atomics: the result depends only
// on the launch), which the host combines.
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace diag {

constexpr const char* kTensorStatsOp = "tensor_stats";
constexpr const char* kTensorStatsEntry = "kiln_tensor_stats";

constexpr int kMaxStatsDims = 8;

// The kernel's view of the tensor. Offsets in elements; strides of any sign, and a dim may
// repeat addresses (stride 0).
struct TensorStatsLayout {
  long long shape[kMaxStatsDims];
  long long strides[kMaxStatsDims];
  int ndim;      // 1..kMaxStatsDims
  int reserved;  // 0
};
static_assert(sizeof(TensorStatsLayout) == 136, "TensorStatsLayout: 16 long longs and 2 ints");

// One block's statistics.
struct TensorStatsPartial {
  long long nan_count;
  long long inf_count;
  long long finite_count;
  double min;  // +inf when finite_count == 0
  double max;  // -inf when finite_count == 0
  double sum;
};
static_assert(sizeof(TensorStatsPartial) == 48, "TensorStatsPartial: 3 counts and 3 doubles");

// kiln_tensor_stats' parameter, by value. numel >= 1; data aligned to the element size.
struct TensorStatsParams {
  TensorStatsPartial* partials;  // [gridDim.x]
  const void* data;
  long long numel;
  TensorStatsLayout layout;
};
static_assert(sizeof(TensorStatsParams) == 160, "TensorStatsParams: 2 pointers, numel, the layout");

}  // namespace diag
}  // namespace kiln
