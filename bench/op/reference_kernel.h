// The reference backends' kernels: plain CUDA C++ that is obviously correct (fp32 math, no
// vectors, no shared-memory tricks), compiled by kilnd as a raw source (kiln::LoadSource) for
// one dtype. They are the refcheck baseline of every row, not competitors.
#pragma once

#include <string>

#include "kiln/kernel.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::bench {

// The CUDA C++ type of a dtype ("float", "__half", "__nv_bfloat16", "int", ...).
const char* CudaTypeName(DType dtype);

// What every reference source may use, prepended to it: cuda_fp16.h, cuda_bf16.h,
// `typedef <dtype> T;` (from -DKILN_REF_T), float ToF(x) / T FromF<T>(float) for the three
// float dtypes, and float E4M3ToF(unsigned char) for fp8 e4m3 bytes.
const std::string& ReferencePrelude();

// Compiles (once per daemon; cached after) and loads `entry` of prelude + `source` with
// T = the dtype's CUDA type. `name` names the raw source ([A-Za-z0-9_]).
StatusOr<Kernel> LoadReferenceKernel(const std::string& name, const std::string& source, const std::string& entry,
                                     DType dtype);

}  // namespace kiln::bench
