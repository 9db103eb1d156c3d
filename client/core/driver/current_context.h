// The CUDA context a call runs in: the calling thread's current one, or — when none is current
// — the primary context of the tensors' device, made current as the CUDA runtime would.
#pragma once

#include "client/core/driver/cuda_driver.h"
#include "kiln/status.h"

namespace kiln::client {

struct ContextInfo {
  CUcontext context = nullptr;
  int device = -1;  // ordinal
  int cc_major = 0;
  int cc_minor = 0;
  int multiprocessors = 0;  // SMs: ops that size their launch by the device (sampling's clusters)
};

// Hot path: one cuCtxGetCurrent plus a thread-local compare when the context was seen before.
// `fallback_device` < 0 means device 0.
StatusOr<ContextInfo> CurrentContext(const CudaDriver& driver, int fallback_device);

// That hot path alone, for the op calls: the thread's current context when CurrentContext has
// seen it before on this thread, else null (no context current, a new one, or a driver error:
// CurrentContext then says which). No Status is built. The pointee is this thread's and changes
// with the next CurrentContext of another context: copy it.
const ContextInfo* SeenCurrentContext(const CudaDriver& driver);

}  // namespace kiln::client
