// The op contract of the activation family (kiln/common/op_contract.h says what a contract
// is): gated activations over rows, input [rows, 2d] = [x | y] per row, out [rows, d]:
//
//   silu_and_mul       out = silu(x) * y
//   gelu_and_mul       out = gelu(x) * y      (exact erf)
//   gelu_tanh_and_mul  out = gelu_tanh(x) * y
//
// Params: dtype (fp16, bf16), vec (kParamVec: a power of two, at most 16 bytes). d is not a
// param: one kernel per (op, dtype, vec) serves every d.
// Launch (the only entry of each op): grid.x = rows * ceil(d / items_per_block), items_per_block
// being the columns of d one block covers (block b works on row b / chunks); block as hinted,
// no dynamic shared memory.
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace activation {

constexpr const char* kSiluAndMulOp = "silu_and_mul";
constexpr const char* kSiluAndMulEntry = "kiln_silu_and_mul";
constexpr const char* kGeluAndMulOp = "gelu_and_mul";
constexpr const char* kGeluAndMulEntry = "kiln_gelu_and_mul";
constexpr const char* kGeluTanhAndMulOp = "gelu_tanh_and_mul";
constexpr const char* kGeluTanhAndMulEntry = "kiln_gelu_tanh_and_mul";

// The largest half-row: d is an int in the kernel, and column indices stay below
// d + columns per block.
constexpr long long kMaxD = 1LL << 30;

// Every entry's parameter, by value. Strides in elements; in and out must not overlap (the
// loads go through the read-only path).
struct ActAndMulParams {
  void* out;
  const void* input;
  long long rows;
  int d;  // out's row length; input's is 2d
  long long out_row_stride;
  long long input_row_stride;
};
static_assert(sizeof(ActAndMulParams) == 48, "ActAndMulParams: 2 pointers, rows, d (padded), 2 strides");

}  // namespace activation
}  // namespace kiln
