#include "bench/op/bench_device.h"

#include <utility>

namespace kiln::bench {

StatusOr<std::unique_ptr<BenchDevice>> BenchDevice::Open(int ordinal) {
  KILN_ASSIGN_OR_RETURN(auto driver, client::CudaDriver::Get());
  KILN_ASSIGN_OR_RETURN(auto count, client::DeviceCount(*driver));
  if (count == 0) return Status(StatusCode::kNoDriver, "the CUDA driver sees no GPU");
  KILN_ASSIGN_OR_RETURN(auto info, client::DescribeDevice(*driver, ordinal));

  std::unique_ptr<BenchDevice> d(new BenchDevice());
  d->driver_ = driver;
  d->info_ = info;
  CUdevice device = 0;
  KILN_RETURN_IF_ERROR(d->Check(driver->cuDeviceGet(&device, ordinal), "cuDeviceGet"));
  int l2 = 0;
  KILN_RETURN_IF_ERROR(d->Check(driver->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device),
                                "cuDeviceGetAttribute(L2_CACHE_SIZE)"));
  d->l2_bytes_ = static_cast<size_t>(l2);
  // The primary context, as the CUDA runtime and the ops API use it.
  KILN_RETURN_IF_ERROR(d->Check(driver->cuDevicePrimaryCtxRetain(&d->context_, device), "cuDevicePrimaryCtxRetain"));
  KILN_RETURN_IF_ERROR(d->Check(driver->cuCtxSetCurrent(d->context_), "cuCtxSetCurrent"));
  // A blocking stream: it orders after the synchronous uploads and memsets (which run on the
  // legacy default stream, and may return before their DMA is done) without more syncs.
  KILN_RETURN_IF_ERROR(d->Check(driver->cuStreamCreate(&d->stream_, CU_STREAM_DEFAULT), "cuStreamCreate"));
  return d;
}

BenchDevice::~BenchDevice() {
  if (stream_ != nullptr) driver_->cuStreamDestroy(stream_);
  // The primary context stays retained: the client keeps kernels loaded in it until exit.
}

size_t BenchDevice::free_bytes() const {
  size_t free = 0, total = 0;
  if (driver_->cuMemGetInfo(&free, &total) != CUDA_SUCCESS) return 0;
  return free;
}

StatusOr<DeviceMemory> DeviceMemory::Allocate(const BenchDevice& device, size_t bytes) {
  return Allocate(device.driver(), bytes);
}

StatusOr<DeviceMemory> DeviceMemory::Allocate(const client::CudaDriver& driver, size_t bytes) {
  DeviceMemory m;
  m.driver_ = &driver;
  m.bytes_ = bytes;
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuMemAlloc(&m.ptr_, bytes > 0 ? bytes : 1),
                                    "cuMemAlloc(" + std::to_string(bytes) + " bytes)"));
  return m;
}

DeviceMemory::~DeviceMemory() {
  if (ptr_ != 0) driver_->cuMemFree(ptr_);
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : driver_(other.driver_), ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (ptr_ != 0) driver_->cuMemFree(ptr_);
    driver_ = other.driver_;
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

StatusOr<std::unique_ptr<HostMappedWords>> HostMappedWords::Allocate(const BenchDevice& device, size_t count) {
  std::unique_ptr<HostMappedWords> w(new HostMappedWords());
  w->driver_ = &device.driver();
  void* host = nullptr;
  KILN_RETURN_IF_ERROR(
      device.Check(device.driver().cuMemHostAlloc(&host, count * sizeof(unsigned),
                                                  CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
                   "cuMemHostAlloc"));
  w->host_ = static_cast<volatile unsigned*>(host);
  for (size_t i = 0; i < count; ++i) w->host_[i] = 0;
  KILN_RETURN_IF_ERROR(
      device.Check(device.driver().cuMemHostGetDevicePointer(&w->device_, host, 0), "cuMemHostGetDevicePointer"));
  return w;
}

HostMappedWords::~HostMappedWords() {
  if (host_ != nullptr) driver_->cuMemFreeHost(const_cast<unsigned*>(host_));
}

}  // namespace kiln::bench
