// kiln::ops: the kernel library as functions on tensors. Each op validates every argument
// before it touches the driver or launches anything, fetches the kernel specialization it
// needs from kilnd once per process (and per CUDA context), and launches it on the caller's
// stream. A repeat call with the same dtype, sizes and device costs no RPC and no allocation.
//
// Devices and contexts: tensors name a CUDA device; the op runs in the calling thread's
// current CUDA context, which must be on that device. With no current context the device's
// primary context is made current (as the CUDA runtime does). `stream` is a CUstream /
// cudaStream_t of that context, or nullptr for the default stream.
#pragma once

#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"
#include "kiln/ops/activation.h"
#include "kiln/ops/decode.h"
#include "kiln/ops/rope.h"
#include "kiln/ops/sampling.h"

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
KILN_API Status rms_norm(const TensorView& out, const TensorView& input, const TensorView& weight,
                         double eps, void* stream = nullptr);

// residual ← input + residual (rounded to the dtype);  input ← rms_norm(residual) · weight.
// Both updates are in place. input and residual have the same shape and dtype and must not
// overlap; the rest as for rms_norm.
KILN_API Status fused_add_rms_norm(const TensorView& input, const TensorView& residual,
                                   const TensorView& weight, double eps, void* stream = nullptr);

}  // namespace kiln::ops
