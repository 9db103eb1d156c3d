// One cuLaunchKernelEx on the caller's stream, with the grid, block, shared memory and
// (optionally) cluster shape of a kiln::LaunchConfig, and a message that names the kernel.
#pragma once

#include <string_view>

#include "client/driver/cuda_driver.h"
#include "kiln/kernel.h"

namespace kiln::client {

Status LaunchFunction(const CudaDriver& driver, CUfunction function, const LaunchConfig& config,
                      void** args, std::string_view kernel_name);

}  // namespace kiln::client
