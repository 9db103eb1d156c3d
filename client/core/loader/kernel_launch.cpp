#include "client/core/loader/kernel_launch.h"

#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/core/loader/launch_observer.h"

namespace kiln::client {

std::atomic<LaunchObserver> detail::g_launch_observer{nullptr};

Status LaunchFunction(const CudaDriver& driver, CUfunction function, const LaunchConfig& config, void** args,
                      std::string_view kernel_name, const ModuleInfo* module) {
  const Dim3& g = config.grid;
  const Dim3& b = config.block;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0)
    return InvalidArgument("launch of " + std::string(kernel_name) + ": grid " + DimsText(g) + " and block " +
                           DimsText(b) + " must be at least 1 in every dimension");
  CUlaunchConfig launch = {};
  launch.gridDimX = g.x;
  launch.gridDimY = g.y;
  launch.gridDimZ = g.z;
  launch.blockDimX = b.x;
  launch.blockDimY = b.y;
  launch.blockDimZ = b.z;
  launch.sharedMemBytes = config.dynamic_smem_bytes;
  launch.hStream = static_cast<CUstream>(config.stream);
  // Not zeroed: CUlaunchAttribute is 72 bytes (a 64-byte value union), and clearing the pair
  // cost a `rep stos` on every call (the op-call overhead); the driver reads only the member
  // its id names, which is set in full below.
  CUlaunchAttribute attrs[2];
  unsigned count = 0;
  if (config.cluster.x > 0) {
    CUlaunchAttribute& cluster = attrs[count++];
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = config.cluster.x;
    cluster.value.clusterDim.y = config.cluster.y > 0 ? config.cluster.y : 1;
    cluster.value.clusterDim.z = config.cluster.z > 0 ? config.cluster.z : 1;
  }
  if (config.programmatic_dependent_launch) {
    CUlaunchAttribute& pdl = attrs[count++];
    pdl.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    pdl.value.programmaticStreamSerializationAllowed = 1;
  }
  launch.attrs = count > 0 ? attrs : nullptr;
  launch.numAttrs = count;
  if (LaunchObserver observer = CurrentLaunchObserver(); KILN_UNLIKELY(observer != nullptr))
    observer(module, kernel_name, config);
  CUresult r = driver.cuLaunchKernelEx(&launch, function, args, nullptr);
  if (r == CUDA_SUCCESS) return OkStatus();
  return Status(StatusCode::kCudaError, "cuLaunchKernelEx(" + std::string(kernel_name) + ", grid " + DimsText(g) +
                                            ", block " + DimsText(b) + ", dynamic smem " +
                                            std::to_string(config.dynamic_smem_bytes) + " B): " + driver.ErrorText(r));
}

}  // namespace kiln::client
