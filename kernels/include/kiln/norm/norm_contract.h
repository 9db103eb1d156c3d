// The op contract of the norm family (kiln/common/op_contract.h says what a contract is):
//
//   rmsnorm            out = input * rsqrt(mean(input^2) + eps) * weight, per row
//   fused_add_rmsnorm  residual += input; input = residual * rsqrt(mean(residual^2) + eps) * weight
//
// Params: dtype (fp32, fp16, bf16), hidden (the row length, 1..kMaxHidden: the reduction shape
// is compiled in), vec (kParamVec: a power of two, at most 16 bytes, dividing hidden).
// Launch (the only entry of each op): grid.x = ceil(rows / items_per_block), items_per_block
// being rows per block; block and no dynamic shared memory as hinted.
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace norm {

constexpr const char* kRmsNormOp = "rmsnorm";
constexpr const char* kRmsNormEntry = "kiln_rmsnorm";
constexpr const char* kFusedAddRmsNormOp = "fused_add_rmsnorm";
constexpr const char* kFusedAddRmsNormEntry = "kiln_fused_add_rmsnorm";

constexpr const char* kParamHidden = "hidden";
constexpr int kMaxHidden = 65536;

// kiln_rmsnorm's parameter, by value. Strides in elements; out may be input (in place).
struct RmsNormParams {
  void* out;
  const void* input;
  const void* weight;
  long long rows;
  long long out_row_stride;
  long long input_row_stride;
  float eps;
};
static_assert(sizeof(RmsNormParams) == 56, "RmsNormParams: 3 pointers, 3 long longs, a float (padded)");

// kiln_fused_add_rmsnorm's parameter, by value: both tensors are updated in place.
struct FusedAddRmsNormParams {
  void* input;
  void* residual;
  const void* weight;
  long long rows;
  long long input_row_stride;
  long long residual_row_stride;
  float eps;
};
static_assert(sizeof(FusedAddRmsNormParams) == 56, "FusedAddRmsNormParams: 3 pointers, 3 long longs, a float");

}  // namespace norm
}  // namespace kiln
