#include "client/ops/plan_device.h"

#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/current_context.h"

namespace kiln::client {

StatusOr<PlanDevice> ResolvePlanDevice(int device, const char* api) {
  if (device < -1)
    return InvalidArgument(std::string(api) +
                           ": device: expected -1 (the current context's) or a CUDA ordinal, found " +
                           std::to_string(device));
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status().WithContext(api);
  if (device < 0) {
    auto ctx = CurrentContext(**driver, 0);
    if (!ctx.ok()) return ctx.status().WithContext(api);
    device = ctx->device;
  }
  CUdevice handle = 0;
  const CUresult found = (*driver)->cuDeviceGet(&handle, device);
  if (found != CUDA_SUCCESS)
    return InvalidArgument(std::string(api) + ": device: cuda:" + std::to_string(device) +
                           " is not a CUDA device here (" + (*driver)->ErrorText(found) + ")");
  PlanDevice out;
  out.ordinal = device;
  KILN_RETURN_IF_ERROR(
      (*driver)
          ->Check((*driver)->cuDeviceGetAttribute(&out.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, handle),
                  "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)")
          .WithContext(api));
  return out;
}

}  // namespace kiln::client
