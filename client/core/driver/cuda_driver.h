// CudaDriver: the CUDA driver API, loaded with dlopen("libcuda.so.1") at first use and never
// linked, so every binary of Kiln starts on a machine without a GPU or driver. Entry points
// are resolved through cuGetProcAddress, each at the CUDA version of the signature we call it
// with (see the table below).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <memory>
#include <string>
#include <string_view>

#include "kiln/status.h"

namespace kiln::client {

// Every driver function Kiln calls, with the CUDA version of the ABI we call it with.
// X(cuMemAlloc, 3020) declares a member `cuMemAlloc` of type PFN_cuMemAlloc_v3020
// (cudaTypedefs.h) and resolves it as cuGetProcAddress("cuMemAlloc", 3020): the entry point
// and its signature are named together, so a driver that adds a new flavour of a function
// (CUDA 13 gave cuCtxSynchronize and cuCtxGetDevice a context parameter) can never hand us a
// pointer of another signature. (cuda.h's macros turn the member and every call through it
// into cuMemAlloc_v2 alike.)
#define KILN_CUDA_DRIVER_FUNCTIONS(X)      \
  X(cuInit, 2000)                          \
  X(cuDriverGetVersion, 2020)              \
  X(cuGetErrorName, 6000)                  \
  X(cuGetErrorString, 6000)                \
  X(cuDeviceGetCount, 2000)                \
  X(cuDeviceGet, 2000)                     \
  X(cuDeviceGetName, 2000)                 \
  X(cuDeviceGetAttribute, 2000)            \
  X(cuDeviceTotalMem, 3020)                \
  X(cuDevicePrimaryCtxRetain, 7000)        \
  X(cuDevicePrimaryCtxRelease, 11000)      \
  X(cuCtxCreate, 12050)                    \
  X(cuCtxDestroy, 4000)                    \
  X(cuCtxGetCurrent, 4000)                 \
  X(cuCtxSetCurrent, 4000)                 \
  X(cuCtxGetDevice, 2000)                  \
  X(cuCtxSynchronize, 2000)                \
  X(cuLibraryLoadData, 12000)              \
  X(cuLibraryUnload, 12000)                \
  X(cuLibraryGetKernel, 12000)             \
  X(cuKernelGetFunction, 12000)            \
  X(cuFuncGetAttribute, 2020)              \
  X(cuFuncSetAttribute, 9000)              \
  X(cuLaunchKernelEx, 11060)               \
  X(cuMemAlloc, 3020)                      \
  X(cuMemFree, 3020)                       \
  X(cuMemcpyHtoD, 3020)                    \
  X(cuMemcpyDtoH, 3020)                    \
  X(cuMemsetD8, 3020)                      \
  X(cuMemGetInfo, 3020)                    \
  X(cuStreamCreate, 2000)                  \
  X(cuStreamDestroy, 4000)                 \
  X(cuStreamSynchronize, 2000)             \
  X(cuMemcpyDtoDAsync, 3020)               \
  X(cuMemHostAlloc, 2020)                  \
  X(cuMemHostGetDevicePointer, 3020)       \
  X(cuMemFreeHost, 2000)                   \
  X(cuDeviceGetUuid, 11040)                \
  X(cuDeviceCanAccessPeer, 4000)           \
  X(cuMemGetAllocationGranularity, 10020)  \
  X(cuMemCreate, 10020)                    \
  X(cuMemRelease, 10020)                   \
  X(cuMemExportToShareableHandle, 10020)   \
  X(cuMemImportFromShareableHandle, 10020) \
  X(cuMemAddressReserve, 10020)            \
  X(cuMemAddressFree, 10020)               \
  X(cuMemMap, 10020)                       \
  X(cuMemUnmap, 10020)                     \
  X(cuMemSetAccess, 10020)                 \
  X(cuEventCreate, 2000)                   \
  X(cuEventRecord, 2000)                   \
  X(cuEventSynchronize, 2000)              \
  X(cuEventElapsedTime, 2000)              \
  X(cuEventDestroy, 4000)                  \
  X(cuMemsetD8Async, 3020)                 \
  X(cuStreamIsCapturing, 10000)            \
  X(cuMemcpyDtoHAsync, 3020)               \
  X(cuMemcpyHtoDAsync, 3020)               \
  X(cuStreamBeginCapture, 10010)           \
  X(cuStreamEndCapture, 10000)             \
  X(cuGraphInstantiateWithFlags, 11040)    \
  X(cuGraphLaunch, 10000)                  \
  X(cuGraphExecDestroy, 10000)             \
  X(cuGraphDestroy, 10000)                 \
  X(cuTensorMapEncodeTiled, 12000)         \
  X(cuOccupancyMaxActiveClusters, 11070)   \
  X(cuEventQuery, 2000)

// The oldest driver that has every function above (the cuLibrary API came with 12.0).
inline constexpr int kMinDriverVersion = 12000;

class CudaDriver {
 public:
  // The process-wide driver: loaded, resolved and cuInit(0)'ed once, on first call. The
  // result (the driver, or why there is none) is kept for the life of the process.
  // kNoDriver: "no CUDA driver: libcuda.so.1 not found (dlopen: ...)", a stub library, a
  // driver older than 12.0, or cuInit failing (e.g. CUDA_ERROR_NO_DEVICE).
  static StatusOr<const CudaDriver*> Get();
  // The same driver, or null where Get() would return an error (then call Get() for it): the op
  // calls' hot path, which a StatusOr's construction and destruction would cost ~60 instructions
  // a call (bench/op/host_path.sh).
  static const CudaDriver* GetOrNull();

  // Loads a specific library file (tests, `kiln doctor`). Same checks as Get().
  static StatusOr<std::unique_ptr<CudaDriver>> Load(const std::string& library);

  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

#define KILN_DECLARE_DRIVER_FUNCTION(name, version) PFN_##name##_v##version name = nullptr;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_DECLARE_DRIVER_FUNCTION)
#undef KILN_DECLARE_DRIVER_FUNCTION

  int version() const { return version_; }                           // 13000 for CUDA 13.0
  const std::string& library_path() const { return library_path_; }  // as the loader found it

  // "CUDA_ERROR_INVALID_VALUE (invalid argument)"
  std::string ErrorText(CUresult result) const;
  // OK for CUDA_SUCCESS, else kCudaError "<what>: CUDA_ERROR_... (...)".
  Status Check(CUresult result, std::string_view what) const;

 private:
  CudaDriver() = default;
  void* handle_ = nullptr;
  int version_ = 0;
  std::string library_path_;
};

// "13.0" for 13000.
std::string CudaVersionString(int version);

}  // namespace kiln::client
