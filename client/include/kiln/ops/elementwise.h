// kiln::ops elementwise ops, over every element of tensors of one shape:
//
//   scale_add:  out = alpha * x + y
//
//   x, y, out  fp16 or bf16, all of one dtype and one shape, each contiguous; out may be x or y
//              (in place), but must not partly overlap either
// Computed in fp32 and rounded once to the dtype. No elements: OK, nothing launched. Devices,
// contexts and streams as for every op (kiln/ops.h).
//
// The C function below is the same op for C callers: DLTensor in, kiln_status out.
#ifndef KILN_OPS_ELEMENTWISE_H_
#define KILN_OPS_ELEMENTWISE_H_

#include "kiln/c_abi.h"

#ifdef __cplusplus
#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::ops {

KILN_API Status scale_add(const TensorView& out, const TensorView& x, const TensorView& y, float alpha,
                          void* stream = nullptr);

}  // namespace kiln::ops

extern "C" {
#endif

/* out = alpha * x + y; fp16 or bf16, one dtype and shape, each contiguous; out may be x or y.
 * No elements: KILN_OK without a launch. stream as for kiln_rms_norm. */
KILN_API kiln_status kiln_scale_add(DLTensor* out, const DLTensor* x, const DLTensor* y, float alpha, void* stream);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* KILN_OPS_ELEMENTWISE_H_ */
