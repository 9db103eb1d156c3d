// API call logging, asked for with KILN_LOGLEVEL: 0 (default) off; 1 the op's name; 3 the name
// and every argument (dtype, shape, strides, pointer, device, eps, stream); the levels between
// log as the one below. Written to stderr as one line when the call starts — before validation
// and launch — so the arguments of a call that brings the device down are on record. Off costs
// one load of a cached integer. (Levels 5 and 10 — tensor statistics, dumps — and
// KILN_LOGDEST are not implemented yet.)
#pragma once

#include <initializer_list>
#include <utility>

#include "kiln/tensor_view.h"

namespace kiln::client {

int ApiLogLevel();  // read from the environment once

// `eps`: NaN for an op that has none.
void LogOpCall(const char* api,
               std::initializer_list<std::pair<const char*, const TensorView*>> tensors,
               double eps, void* stream);

}  // namespace kiln::client
