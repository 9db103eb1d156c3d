#include "client/core/driver/cuda_driver.h"

#include <dlfcn.h>
#include <link.h>

namespace kiln::client {
namespace {

constexpr const char* kDriverLibrary = "libcuda.so.1";

using GetProcAddressFn = CUresult(CUDAAPI*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

Status NoDriver(std::string message) { return Status(StatusCode::kNoDriver, std::move(message)); }

std::string LoadedPath(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0')
    return map->l_name;
  return fallback;
}

}  // namespace

std::string CudaVersionString(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

StatusOr<std::unique_ptr<CudaDriver>> CudaDriver::Load(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return NoDriver("no CUDA driver: " + library + " not found (dlopen: " + (why != nullptr ? why : "unknown error") +
                    "); GPU work needs the NVIDIA driver, the rest of Kiln does not");
  }
  std::unique_ptr<CudaDriver> driver(new CudaDriver());
  driver->handle_ = handle;
  driver->library_path_ = LoadedPath(handle, library);

  // cuGetProcAddress_v2 exists in every driver since 12.0; the plain symbol is the older ABI.
  auto get_proc = reinterpret_cast<GetProcAddressFn>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr)
    return NoDriver("CUDA driver too old: " + driver->library_path_ +
                    " has no cuGetProcAddress_v2; Kiln needs a driver for CUDA " +
                    CudaVersionString(kMinDriverVersion) + " or newer");

  std::string missing;
#define KILN_RESOLVE_DRIVER_FUNCTION(name, version)                                  \
  {                                                                                  \
    void* fn = nullptr;                                                              \
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;     \
    CUresult r = get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found); \
    if (r == CUDA_SUCCESS && found == CU_GET_PROC_ADDRESS_SUCCESS && fn != nullptr)  \
      driver->name = reinterpret_cast<decltype(driver->name)>(fn);                   \
    else missing += std::string(missing.empty() ? "" : ", ") + #name;                \
  }
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_RESOLVE_DRIVER_FUNCTION)
#undef KILN_RESOLVE_DRIVER_FUNCTION

  if (driver->cuDriverGetVersion != nullptr) driver->cuDriverGetVersion(&driver->version_);
  if (!missing.empty())
    return NoDriver("CUDA driver " + driver->library_path_ + " (CUDA " + CudaVersionString(driver->version_) +
                    ") lacks " + missing + "; Kiln needs a driver for CUDA " + CudaVersionString(kMinDriverVersion) +
                    " or newer");
  if (driver->version_ < kMinDriverVersion)
    return NoDriver("CUDA driver too old: " + driver->library_path_ + " supports CUDA " +
                    CudaVersionString(driver->version_) + "; Kiln needs " + CudaVersionString(kMinDriverVersion) +
                    " or newer");

  CUresult init = driver->cuInit(0);
  if (init == CUDA_ERROR_STUB_LIBRARY)
    return NoDriver("no CUDA driver: " + driver->library_path_ +
                    " is the toolkit's stub library, not a driver (cuInit: " + driver->ErrorText(init) + ")");
  if (init != CUDA_SUCCESS)
    return NoDriver("CUDA driver " + driver->library_path_ + " (CUDA " + CudaVersionString(driver->version_) +
                    ") cannot start: cuInit: " + driver->ErrorText(init));
  return driver;
}

namespace {

// The process-wide driver, or why there is none: loaded once, on first use.
struct LoadedDriver {
  const CudaDriver* driver = nullptr;
  const Status* error = nullptr;
};

const LoadedDriver& ProcessDriver() {
  // Deliberately leaked: the process-wide driver stays loaded until exit (other libraries of
  // the process may hold handles into libcuda, and kernels may still run at exit).
  // A function-local static, not std::call_once: libstdc++'s call_once sets thread-local state
  // on every call, even once done, and this runs on every op call (the op-call overhead).
  static const LoadedDriver loaded = [] {
    auto result = CudaDriver::Load(kDriverLibrary);
    if (result.ok()) return LoadedDriver{std::move(result).value().release(), nullptr};
    return LoadedDriver{nullptr, new Status(result.status())};
  }();
  return loaded;
}

}  // namespace

StatusOr<const CudaDriver*> CudaDriver::Get() {
  const LoadedDriver& loaded = ProcessDriver();
  if (loaded.driver == nullptr) return *loaded.error;
  return loaded.driver;
}

const CudaDriver* CudaDriver::GetOrNull() { return ProcessDriver().driver; }

CudaDriver::~CudaDriver() {
  // Only drivers loaded explicitly (tests, doctor) get here; the process-wide one never does.
  if (handle_ != nullptr) dlclose(handle_);
}

std::string CudaDriver::ErrorText(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName != nullptr) cuGetErrorName(result, &name);
  if (cuGetErrorString != nullptr) cuGetErrorString(result, &text);
  std::string out = name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(result));
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

Status CudaDriver::Check(CUresult result, std::string_view what) const {
  if (result == CUDA_SUCCESS) return OkStatus();
  return Status(StatusCode::kCudaError, std::string(what) + ": " + ErrorText(result));
}

}  // namespace kiln::client
