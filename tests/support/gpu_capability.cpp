#include "tests/support/gpu_capability.h"

#include <cstdio>
#include <cstdlib>

#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/devices.h"

namespace kiln::testing {
namespace {

std::string Probe(int min_cc, int max_cc, GpuInfo* info) {
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) return driver.status().message();
  auto count = client::DeviceCount(**driver);
  if (!count.ok()) return count.status().message();
  if (*count == 0) return "the CUDA driver sees no GPU";
  auto device = client::DescribeDevice(**driver, 0);
  if (!device.ok()) return device.status().message();
  info->ordinal = 0;
  info->name = device->name;
  info->cc = device->cc();
  info->arch = device->arch();
  info->total_memory = device->total_memory;
  info->multiprocessors = device->multiprocessors;
  info->driver_version = (*driver)->version();
  if (info->cc < min_cc)
    return "needs compute capability " + std::to_string(min_cc / 10) + "." + std::to_string(min_cc % 10) +
           " or newer; cuda:0 (" + device->name + ") is " + std::to_string(device->cc_major) + "." +
           std::to_string(device->cc_minor);
  if (max_cc != 0 && info->cc > max_cc)
    return "needs compute capability " + std::to_string(min_cc / 10) + "." + std::to_string(min_cc % 10) + " to " +
           std::to_string(max_cc / 10) + "." + std::to_string(max_cc % 10) +
           " (arch-specific code of that family only); cuda:0 (" + device->name + ") is " +
           std::to_string(device->cc_major) + "." + std::to_string(device->cc_minor);
  return "";
}

}  // namespace

std::string GpuUnavailableReason(int min_cc, int max_cc) {
  GpuInfo info;
  return Probe(min_cc, max_cc, &info);
}

std::string GpusUnavailableReason(int count, int min_cc) {
  GpuInfo info;
  const std::string reason = Probe(min_cc, 0, &info);
  if (!reason.empty()) return reason;
  auto driver = client::CudaDriver::Get();
  auto devices = client::DeviceCount(**driver);
  if (!devices.ok()) return devices.status().message();
  if (*devices < count)
    return "needs " + std::to_string(count) + " GPUs; the CUDA driver sees " + std::to_string(*devices);
  for (int d = 1; d < count; ++d) {
    auto device = client::DescribeDevice(**driver, d);
    if (!device.ok()) return device.status().message();
    if (device->cc() < min_cc)
      return "needs compute capability " + std::to_string(min_cc / 10) + "." + std::to_string(min_cc % 10) +
             " or newer on every GPU; cuda:" + std::to_string(d) + " (" + device->name + ") is " +
             std::to_string(device->cc_major) + "." + std::to_string(device->cc_minor);
  }
  return "";
}

void RequireGpus(int count, int min_cc) {
  const std::string reason = GpusUnavailableReason(count, min_cc);
  if (!reason.empty()) {
    std::printf("SKIPPED: %s\n", reason.c_str());
    std::fflush(stdout);
    std::exit(KILN_TEST_SKIP_CODE);
  }
}

GpuInfo RequireGpu(int min_cc, int max_cc) {
  GpuInfo info;
  const std::string reason = Probe(min_cc, max_cc, &info);
  if (!reason.empty()) {
    std::printf("SKIPPED: %s\n", reason.c_str());
    std::fflush(stdout);
    std::exit(KILN_TEST_SKIP_CODE);
  }
  return info;
}

}  // namespace kiln::testing
