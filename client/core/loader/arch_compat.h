// Whether a cubin built for an arch ("sm_90a", "sm_80", "sm_100f") runs on a device of a
// given compute capability, checked before launching so a mismatch is a message, not a
// CUDA_ERROR_NO_BINARY_FOR_GPU from deep inside the driver.
#pragma once

#include <string_view>

namespace kiln::client {

// sm_XY runs on X.Y' with Y' >= Y; sm_XYa only on X.Y; sm_XYf on X.Y' with Y' >= Y.
// Unparseable names answer true (the driver will judge).
bool CubinRunsOn(std::string_view arch, int cc_major, int cc_minor);

}  // namespace kiln::client
