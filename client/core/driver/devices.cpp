#include "client/core/driver/devices.h"

#include "client/core/api/invalid_argument.h"

namespace kiln::client {

std::string ArchForComputeCapability(int major, int minor) {
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

std::string DeviceInfo::arch() const { return ArchForComputeCapability(cc_major, cc_minor); }

StatusOr<int> DeviceCount(const CudaDriver& driver) {
  int count = 0;
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuDeviceGetCount(&count), "cuDeviceGetCount"));
  return count;
}

StatusOr<DeviceInfo> DescribeDevice(const CudaDriver& driver, int ordinal) {
  KILN_ASSIGN_OR_RETURN(auto count, DeviceCount(driver));
  if (ordinal < 0 || ordinal >= count)
    return InvalidArgument("cuda:" + std::to_string(ordinal) + " does not exist: the driver sees " +
                           std::to_string(count) + " device(s)" +
                           (count > 0 ? " (cuda:0 ... cuda:" + std::to_string(count - 1) + ")" : ""));
  CUdevice device = 0;
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuDeviceGet(&device, ordinal), "cuDeviceGet"));
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuDeviceGetName(name, sizeof(name) - 1, device), "cuDeviceGetName"));
  info.name = name;
  KILN_RETURN_IF_ERROR(
      driver.Check(driver.cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
                   "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)"));
  KILN_RETURN_IF_ERROR(
      driver.Check(driver.cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
                   "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)"));
  KILN_RETURN_IF_ERROR(
      driver.Check(driver.cuDeviceGetAttribute(&info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device),
                   "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)"));
  size_t bytes = 0;
  KILN_RETURN_IF_ERROR(driver.Check(driver.cuDeviceTotalMem(&bytes, device), "cuDeviceTotalMem"));
  info.total_memory = bytes;
  return info;
}

}  // namespace kiln::client
