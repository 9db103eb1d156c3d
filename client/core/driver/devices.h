// The GPUs the driver sees: name, compute capability, memory, and the arch Kiln asks for.
#pragma once

#include <cstdint>
#include <string>

#include "client/core/driver/cuda_driver.h"
#include "kiln/status.h"

namespace kiln::client {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  uint64_t total_memory = 0;
  int multiprocessors = 0;

  int cc() const { return cc_major * 10 + cc_minor; }  // 90 for 9.0
  std::string arch() const;                            // "sm_90"
};

// The arch a device of compute capability major.minor asks the daemon for: "sm_90" for 9.0.
// The portable name: the daemon upgrades it to "sm_90a" only for specs that need it.
std::string ArchForComputeCapability(int major, int minor);

StatusOr<int> DeviceCount(const CudaDriver& driver);
// INVALID_ARGUMENT when `ordinal` is not a device ("cuda:3 does not exist: 2 devices").
StatusOr<DeviceInfo> DescribeDevice(const CudaDriver& driver, int ordinal);

}  // namespace kiln::client
