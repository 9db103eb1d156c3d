// kiln::ops RMSNorm: rms_norm and fused_add_rms_norm over the rows of a tensor (the last dim is
// the row). Part of kiln/ops.h (devices, contexts and streams as described there).
//
// The C functions below are the same ops for C callers: DLTensor in, kiln_status out.
#ifndef KILN_OPS_NORM_H_
#define KILN_OPS_NORM_H_

#include "kiln/c_abi.h"

#ifdef __cplusplus
#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::ops {

// out = input / sqrt(mean(input², over the last dim) + eps) * weight
//
//   input   [..., hidden]  fp32, fp16 or bf16; leading dims are flattened into rows and must
//                          be collapsible by their strides; the last dim has stride 1
//   weight  [hidden]       same dtype, contiguous
//   out     input's shape and dtype; may be the very same memory as input (in place), but must
//                          not partially overlap it
//   eps     finite and > 0 (as a float)
//   hidden  1 ... 65536
// An empty input (no rows) returns OK without launching.
KILN_API Status rms_norm(const TensorView& out, const TensorView& input, const TensorView& weight, double eps,
                         void* stream = nullptr);

// residual ← input + residual (rounded to the dtype);  input ← rms_norm(residual) · weight.
// Both updates are in place. input and residual have the same shape and dtype and must not
// overlap; the rest as for rms_norm.
KILN_API Status fused_add_rms_norm(const TensorView& input, const TensorView& residual, const TensorView& weight,
                                   double eps, void* stream = nullptr);

}  // namespace kiln::ops

extern "C" {
#endif

/* out = input / sqrt(mean(input^2, last dim) + eps) * weight.
 * input [..., hidden] (leading dims flattened by strides; last dim stride 1), weight [hidden],
 * out like input (may be input itself). Same dtype (fp32, fp16, bf16), same CUDA device, which
 * must be the current context's (with no current context its primary context is used).
 * stream: a CUstream / cudaStream_t, or NULL for the default stream. */
KILN_API kiln_status kiln_rms_norm(DLTensor* out, const DLTensor* input, const DLTensor* weight, double eps,
                                   void* stream);

/* residual <- input + residual; input <- rms_norm(residual) * weight; both in place. */
KILN_API kiln_status kiln_fused_add_rms_norm(DLTensor* input, DLTensor* residual, const DLTensor* weight, double eps,
                                             void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_OPS_NORM_H_ */
