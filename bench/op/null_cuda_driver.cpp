// A CUDA driver that does nothing, for measuring Kiln's host path on a machine without a GPU
// (bench/op/host_path.sh, docs/benchmarking.md): every call succeeds at once, handles are fake,
// a launch launches nothing. Built as libcuda.so.1 in its own folder; a process finds it through
// LD_LIBRARY_PATH. Never a stand-in for the driver in a test of behaviour: it only makes the
// instructions Kiln runs per op call countable (callgrind) without the driver's own.
#include <cuda.h>

#include <cstring>

namespace {

// One device, sm_90 with 132 SMs (an H200's shape, so ops choose what they choose there).
CUresult Init(unsigned) { return CUDA_SUCCESS; }
CUresult DriverGetVersion(int* version) {
  *version = 13000;
  return CUDA_SUCCESS;
}
CUresult ErrorText(CUresult, const char** text) {
  *text = "the no-op driver has no errors";
  return CUDA_SUCCESS;
}
CUresult DeviceGetCount(int* count) {
  *count = 1;
  return CUDA_SUCCESS;
}
CUresult DeviceGet(CUdevice* device, int) {
  *device = 0;
  return CUDA_SUCCESS;
}
CUresult DeviceGetName(char* name, int length, CUdevice) {
  std::strncpy(name, "no-op driver", static_cast<size_t>(length));
  return CUDA_SUCCESS;
}
CUresult DeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
    default: *value = 1024; break;
  }
  return CUDA_SUCCESS;
}
CUresult DeviceTotalMem(size_t* bytes, CUdevice) {
  *bytes = size_t{1} << 37;
  return CUDA_SUCCESS;
}

// Handles point at these objects: non-null, never dereferenced.
int context_object, library_object, kernel_object, function_object;
thread_local CUcontext current = nullptr;

CUresult PrimaryCtxRetain(CUcontext* context, CUdevice) {
  *context = reinterpret_cast<CUcontext>(&context_object);
  return CUDA_SUCCESS;
}
CUresult CtxGetCurrent(CUcontext* context) {
  *context = current;
  return CUDA_SUCCESS;
}
CUresult CtxSetCurrent(CUcontext context) {
  current = context;
  return CUDA_SUCCESS;
}
CUresult CtxGetDevice(CUdevice* device) {
  *device = 0;
  return CUDA_SUCCESS;
}
CUresult LibraryLoadData(CUlibrary* library, const void*, CUjit_option*, void**, unsigned, CUlibraryOption*, void**,
                         unsigned) {
  *library = reinterpret_cast<CUlibrary>(&library_object);
  return CUDA_SUCCESS;
}
CUresult LibraryGetKernel(CUkernel* kernel, CUlibrary, const char*) {
  *kernel = reinterpret_cast<CUkernel>(&kernel_object);
  return CUDA_SUCCESS;
}
CUresult KernelGetFunction(CUfunction* function, CUkernel) {
  *function = reinterpret_cast<CUfunction>(&function_object);
  return CUDA_SUCCESS;
}
CUresult FuncGetAttribute(int* value, CUfunction_attribute, CUfunction) {
  *value = 1024;  // MAX_THREADS_PER_BLOCK: every launch hint fits
  return CUDA_SUCCESS;
}
CUresult MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = *total_bytes = size_t{1} << 37;
  return CUDA_SUCCESS;
}
CUresult StreamIsCapturing(CUstream, CUstreamCaptureStatus* status) {
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
// Everything else (cuLaunchKernelEx among them): success, no output written. Called through the
// caller's own signature: on x86-64 the caller owns its arguments, so a function that reads none
// and returns 0 is a valid stand-in for any of them.
CUresult Succeed() { return CUDA_SUCCESS; }

struct Entry {
  const char* name;
  void* function;
};
const Entry kEntries[] = {
    {"cuInit", reinterpret_cast<void*>(Init)},
    {"cuDriverGetVersion", reinterpret_cast<void*>(DriverGetVersion)},
    {"cuGetErrorName", reinterpret_cast<void*>(ErrorText)},
    {"cuGetErrorString", reinterpret_cast<void*>(ErrorText)},
    {"cuDeviceGetCount", reinterpret_cast<void*>(DeviceGetCount)},
    {"cuDeviceGet", reinterpret_cast<void*>(DeviceGet)},
    {"cuDeviceGetName", reinterpret_cast<void*>(DeviceGetName)},
    {"cuDeviceGetAttribute", reinterpret_cast<void*>(DeviceGetAttribute)},
    {"cuDeviceTotalMem", reinterpret_cast<void*>(DeviceTotalMem)},
    {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(PrimaryCtxRetain)},
    {"cuCtxGetCurrent", reinterpret_cast<void*>(CtxGetCurrent)},
    {"cuCtxSetCurrent", reinterpret_cast<void*>(CtxSetCurrent)},
    {"cuCtxGetDevice", reinterpret_cast<void*>(CtxGetDevice)},
    {"cuLibraryLoadData", reinterpret_cast<void*>(LibraryLoadData)},
    {"cuLibraryGetKernel", reinterpret_cast<void*>(LibraryGetKernel)},
    {"cuKernelGetFunction", reinterpret_cast<void*>(KernelGetFunction)},
    {"cuFuncGetAttribute", reinterpret_cast<void*>(FuncGetAttribute)},
    {"cuMemGetInfo", reinterpret_cast<void*>(MemGetInfo)},
    {"cuStreamIsCapturing", reinterpret_cast<void*>(StreamIsCapturing)},
};

}  // namespace

// The one symbol Kiln looks up (client/core/driver/cuda_driver.cpp resolves every function
// through it).
extern "C" __attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* name, void** function, int,
                                                                               cuuint64_t,
                                                                               CUdriverProcAddressQueryResult* found) {
  *function = reinterpret_cast<void*>(Succeed);
  for (const Entry& e : kEntries)
    if (std::strcmp(e.name, name) == 0) *function = e.function;
  *found = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}
