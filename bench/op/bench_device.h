// BenchDevice: the one GPU kiln-bench measures — its driver, primary context (current on the
// calling thread), a stream, and what the rows report about it (name, arch, L2 size) — and
// the device and host-mapped memory the cases allocate.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>

#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/devices.h"
#include "kiln/status.h"

namespace kiln::bench {

class BenchDevice {
 public:
  // kNoDriver when there is no usable driver or no device (kiln-bench then exits with 77);
  // INVALID_ARGUMENT when `ordinal` is not a device.
  static StatusOr<std::unique_ptr<BenchDevice>> Open(int ordinal);
  ~BenchDevice();
  BenchDevice(const BenchDevice&) = delete;
  BenchDevice& operator=(const BenchDevice&) = delete;

  const client::CudaDriver& driver() const { return *driver_; }
  const client::DeviceInfo& info() const { return info_; }
  std::string arch() const { return info_.arch(); }  // "sm_90": what the client asks kilnd for
  CUcontext context() const { return context_; }
  CUstream stream() const { return stream_; }
  size_t l2_bytes() const { return l2_bytes_; }
  size_t free_bytes() const;

  Status Check(CUresult result, const std::string& what) const { return driver_->Check(result, what); }
  Status Synchronize() const { return Check(driver_->cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

 private:
  BenchDevice() = default;
  const client::CudaDriver* driver_ = nullptr;
  client::DeviceInfo info_;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  size_t l2_bytes_ = 0;
};

// cuMemAlloc'ed memory, freed on destruction. Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  static StatusOr<DeviceMemory> Allocate(const BenchDevice& device, size_t bytes);
  // In the calling thread's current context: for a routine's workspace or scratch, made in
  // Prepare (where kiln-bench's context is current).
  static StatusOr<DeviceMemory> Allocate(const client::CudaDriver& driver, size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;

  CUdeviceptr ptr() const { return ptr_; }
  void* data() const { return reinterpret_cast<void*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  const client::CudaDriver* driver_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// Pinned host memory the device reads and writes through a mapping (cuMemHostAlloc with
// DEVICEMAP): the stream gate's flags.
class HostMappedWords {
 public:
  static StatusOr<std::unique_ptr<HostMappedWords>> Allocate(const BenchDevice& device, size_t count);
  ~HostMappedWords();
  volatile unsigned* host() const { return host_; }
  CUdeviceptr device() const { return device_; }

 private:
  const client::CudaDriver* driver_ = nullptr;
  volatile unsigned* host_ = nullptr;
  CUdeviceptr device_ = 0;
};

}  // namespace kiln::bench
