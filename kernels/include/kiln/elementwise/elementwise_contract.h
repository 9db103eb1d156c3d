// The op contract of the elementwise family (kiln/common/op_contract.h says what a contract
// is): ops over every element of tensors of one shape.
//
//   scale_add  out = alpha * x + y
//
// Params: dtype (fp16, bf16). n (the element count) is a launch argument: one kernel per dtype.
// Launch: grid.x = ceil(n / items_per_block), block as hinted, no dynamic shared memory.
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace elementwise {

constexpr const char* kScaleAddOp = "scale_add";
constexpr const char* kScaleAddEntry = "kiln_scale_add";

// The entry's parameter, by value. Every tensor contiguous, n elements each; out may be x or y
// (each thread reads its elements before it writes them).
struct ScaleAddParams {
  void* out;
  const void* x;
  const void* y;
  long long n;
  float alpha;
};
static_assert(sizeof(ScaleAddParams) == 40, "ScaleAddParams: 3 pointers, n, alpha (padded)");

}  // namespace elementwise
}  // namespace kiln
