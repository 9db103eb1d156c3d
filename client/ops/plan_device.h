// The device a host plan (BatchDecodePlan, BatchPrefillPlan) is made for: the ordinal asked
// for, or the current context's, and its SM count, which sizes the plan's split.
#pragma once

#include "kiln/status.h"

namespace kiln::client {

struct PlanDevice {
  int ordinal = 0;
  int sms = 0;
};

// device: a CUDA ordinal, or -1 for the current context's device (device 0 when none is
// current). INVALID_ARGUMENT for a device that is not there; errors name `api`.
StatusOr<PlanDevice> ResolvePlanDevice(int device, const char* api);

}  // namespace kiln::client
