// API call logging, asked for with KILN_API_LOG: 0 (default) off; 1 the op's name; 2 the name
// and every argument (dtype, shape, strides, pointer, device, eps, stream). Written to stderr
// as one line when the call starts — before validation and launch — so the arguments of a call
// that brings the device down are on record. Off costs one load of a cached integer.
#pragma once

#include <initializer_list>
#include <utility>

#include "kiln/tensor_view.h"

namespace kiln::client {

int ApiLogLevel();  // read from the environment once

void LogOpCall(const char* api,
               std::initializer_list<std::pair<const char*, const TensorView*>> tensors,
               double eps, void* stream);

}  // namespace kiln::client
