// The gemm family's kiln backends run only on a device of the sm_90a family (the daemon
// refuses their specs for any other): elsewhere they do not take the case (INVALID_ARGUMENT:
// not applicable), as a GPU test is skipped, not failed, on hardware without the feature.
#pragma once

#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "kiln/status.h"

namespace kiln::bench {

// OK on a compute capability 9.x device (the current context's); `op` names the routine.
inline Status RequireSm90(const char* op) {
  KILN_ASSIGN_OR_RETURN(const client::CudaDriver* driver, client::CudaDriver::Get());
  CUdevice device = 0;
  KILN_RETURN_IF_ERROR(driver->Check(driver->cuCtxGetDevice(&device), "cuCtxGetDevice"));
  int major = 0;
  KILN_RETURN_IF_ERROR(
      driver->Check(driver->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
                    "cuDeviceGetAttribute"));
  if (major != 9)
    return client::InvalidArgument(std::string(op) + ": the kernel is sm_90a code (wgmma, TMA); this device is " +
                                   "compute capability " + std::to_string(major) + ".x");
  return OkStatus();
}

}  // namespace kiln::bench
