// kiln::ops gated activations, the MLP step between the gate/up projection and the down
// projection: input [..., 2d] holds x (the first d columns) and y (the last d) of each row;
//
//   silu_and_mul:       out = silu(x) * y,       silu(x) = x / (1 + exp(-x))
//   gelu_and_mul:       out = gelu(x) * y,       gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))   (exact)
//   gelu_tanh_and_mul:  out = gelu_tanh(x) * y,  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//
//   input  [..., 2d]  fp16 or bf16; leading dims are flattened into rows and must be
//                     collapsible by their strides (padded rows are fine); the last dim has
//                     stride 1 and an even size 2d, 1 <= d <= 2^30
//   out    [..., d]   input's dtype and leading dims; rows may be padded; must not overlap input
// Computed in fp32 and rounded once to the dtype. Any d works; when d, both row strides and
// both pointers are multiples of 8 elements (16 bytes) every access is a 16-byte vector,
// otherwise the widest that divides them all (scalar for odd d). No rows: OK, nothing launched.
// Devices, contexts and streams as for every op (kiln/ops.h).
//
// The C functions below are the same ops for C callers: DLTensor in, kiln_status out.
#ifndef KILN_OPS_ACTIVATION_H_
#define KILN_OPS_ACTIVATION_H_

#include "kiln/c_abi.h"

#ifdef __cplusplus
#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::ops {

KILN_API Status silu_and_mul(const TensorView& out, const TensorView& input, void* stream = nullptr);
KILN_API Status gelu_and_mul(const TensorView& out, const TensorView& input, void* stream = nullptr);
KILN_API Status gelu_tanh_and_mul(const TensorView& out, const TensorView& input, void* stream = nullptr);

}  // namespace kiln::ops

extern "C" {
#endif

/* Gated activations: input [..., 2d] = [x | y] per row, out [..., d]:
 *   kiln_silu_and_mul       out = silu(x) * y,  silu(x) = x / (1 + exp(-x))
 *   kiln_gelu_and_mul       out = gelu(x) * y,  exact: 0.5 x (1 + erf(x / sqrt(2)))
 *   kiln_gelu_tanh_and_mul  out = gelu_tanh(x) * y,  0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * fp16 or bf16 (out has input's dtype), computed in fp32. Leading dims flattened by strides
 * (padded rows allowed), last dim stride 1; out has input's leading dims and must not overlap
 * it; 1 <= d <= 2^30. No rows: KILN_OK without a launch. stream as for kiln_rms_norm. */
KILN_API kiln_status kiln_silu_and_mul(DLTensor* out, const DLTensor* input, void* stream);
KILN_API kiln_status kiln_gelu_and_mul(DLTensor* out, const DLTensor* input, void* stream);
KILN_API kiln_status kiln_gelu_tanh_and_mul(DLTensor* out, const DLTensor* input, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_OPS_ACTIVATION_H_ */
