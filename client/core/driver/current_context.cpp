#include "client/core/driver/current_context.h"

#include <map>
#include <mutex>
#include <vector>

#include "client/core/api/invalid_argument.h"
#include "client/core/driver/devices.h"

namespace kiln::client {
namespace {

// What the process has learnt about contexts and devices. Never shrinks: primary contexts
// stay retained for the life of the process (as with the CUDA runtime), and a context handle
// maps to the device it was created on.
struct ContextRegistry {
  std::mutex mu;
  bool devices_known = false;
  std::vector<CUdevice> handles;        // ordinal → CUdevice
  std::vector<ContextInfo> by_ordinal;  // cc per ordinal (context unused)
  std::vector<CUcontext> primary;       // ordinal → retained primary context, or null
  std::map<CUcontext, ContextInfo> contexts;
};

ContextRegistry& Registry() {
  static auto* registry = new ContextRegistry();  // leaked: used until exit
  return *registry;
}

Status LearnDevices(const CudaDriver& driver, ContextRegistry& r) {
  if (r.devices_known) return OkStatus();
  KILN_ASSIGN_OR_RETURN(auto count, DeviceCount(driver));
  if (count == 0) return Status(StatusCode::kNoDriver, "the CUDA driver sees no GPU (cuDeviceGetCount = 0)");
  r.handles.resize(count);
  r.by_ordinal.resize(count);
  r.primary.assign(count, nullptr);
  for (int i = 0; i < count; ++i) {
    KILN_RETURN_IF_ERROR(driver.Check(driver.cuDeviceGet(&r.handles[i], i), "cuDeviceGet"));
    ContextInfo& info = r.by_ordinal[i];
    info.device = i;
    KILN_RETURN_IF_ERROR(driver.Check(
        driver.cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, r.handles[i]),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)"));
    KILN_RETURN_IF_ERROR(driver.Check(
        driver.cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, r.handles[i]),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)"));
    KILN_RETURN_IF_ERROR(driver.Check(
        driver.cuDeviceGetAttribute(&info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, r.handles[i]),
        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)"));
  }
  r.devices_known = true;
  return OkStatus();
}

StatusOr<ContextInfo> Describe(const CudaDriver& driver, CUcontext ctx, ContextRegistry& r) {
  auto it = r.contexts.find(ctx);
  if (it != r.contexts.end()) return it->second;
  CUdevice handle = 0;
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuCtxGetDevice(&handle), "cuCtxGetDevice"));
  for (size_t i = 0; i < r.handles.size(); ++i) {
    if (r.handles[i] != handle) continue;
    ContextInfo info = r.by_ordinal[i];
    info.context = ctx;
    r.contexts.emplace(ctx, info);
    return info;
  }
  return Status(StatusCode::kInternal, "the current CUDA context's device (CUdevice " + std::to_string(handle) +
                                           ") is not among the " + std::to_string(r.handles.size()) + " devices");
}

// The context CurrentContext found last on this thread.
thread_local ContextInfo t_last;

}  // namespace

const ContextInfo* SeenCurrentContext(const CudaDriver& driver) {
  CUcontext ctx = nullptr;
  if (driver.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr || ctx != t_last.context) return nullptr;
  return &t_last;
}

StatusOr<ContextInfo> CurrentContext(const CudaDriver& driver, int fallback_device) {
  ContextInfo& last = t_last;
  CUcontext ctx = nullptr;
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent"));
  if (ctx != nullptr && ctx == last.context) return last;

  ContextRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  KILN_RETURN_IF_ERROR(LearnDevices(driver, r));
  if (ctx == nullptr) {
    int ordinal = fallback_device < 0 ? 0 : fallback_device;
    if (ordinal >= static_cast<int>(r.handles.size()))
      return InvalidArgument("cuda:" + std::to_string(ordinal) + " does not exist: the driver sees " +
                             std::to_string(r.handles.size()) + " device(s)");
    if (r.primary[ordinal] == nullptr) {
      KILN_RETURN_IF_ERROR(driver.Check(driver.cuDevicePrimaryCtxRetain(&r.primary[ordinal], r.handles[ordinal]),
                                        "cuDevicePrimaryCtxRetain(cuda:" + std::to_string(ordinal) + ")"));
    }
    ctx = r.primary[ordinal];
    KILN_RETURN_IF_ERROR(driver.Check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent"));
  }
  auto info = Describe(driver, ctx, r);
  if (info.ok()) last = *info;
  return info;
}

}  // namespace kiln::client
