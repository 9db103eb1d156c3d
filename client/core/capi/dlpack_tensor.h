// A DLPack DLTensor as a kiln::TensorView, for the C ABI: every field checked, byte_offset
// applied, NULL strides read as compact row-major.
#pragma once

#include <dlpack/dlpack.h>

#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// INVALID_ARGUMENT "<name>: ..." for a NULL tensor, a rank outside 1..kMaxTensorDims, a NULL
// shape, lanes != 1, a dtype Kiln has no name for, or a device type other than CPU, CUDA,
// CUDA host or CUDA managed (the ops then accept only CUDA).
StatusOr<TensorView> FromDLTensor(const DLTensor* tensor, const char* name);

}  // namespace kiln::client
