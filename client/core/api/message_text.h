// How values are spelled inside the client's messages and records: pointers, shapes and
// strides, launch dimensions, numbers. One spelling each, so that an error, a log line and a
// dump show a value the same way (tests assert them byte for byte).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "kiln/kernel.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// "0x7f12a0000000"; "(nil)" for null, as glibc's %p, but the same on every libc.
std::string PointerText(const void* p);
std::string PointerText(uintptr_t address);

// "[7, 4096]"
std::string ListText(std::span<const int64_t> values);
std::string ListText(std::initializer_list<int64_t> values);

// A tensor's shape and strides, "[7, 4096]" and "[4096, 1]": its first ndim dims, at most
// kMaxTensorDims ("[]" for a rank below 1).
std::string ShapeText(const TensorView& tensor);
std::string StridesText(const TensorView& tensor);

// A grid or block, "(7, 1, 1)".
std::string DimsText(const Dim3& dims);

// A parameter's value as printf's %g: six significant digits ("1e-06", "0.5", "inf"). Enough
// to recognize the value in a message; DoubleText (client/diag/op_call.h) is the exact one
// that call records need.
std::string NumberText(double value);

}  // namespace kiln::client
