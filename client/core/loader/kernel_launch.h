// One cuLaunchKernelEx on the caller's stream, with the grid, block, shared memory and
// (optionally) cluster shape of a kiln::LaunchConfig, and a message that names the kernel.
// Every launch of the library goes through here, which makes it the place where the launch
// observer (launch_observer.h; the call diagnostics install one) learns the kernel and launch
// config of a call, right before the launch; with none installed that costs one branch.
#pragma once

#include <string_view>

#include "client/core/driver/cuda_driver.h"
#include "kiln/kernel.h"

namespace kiln::client {

// `module`: the loaded module the function comes from (its URI, cache key and arch go into the
// call log); null for a launch without one.
Status LaunchFunction(const CudaDriver& driver, CUfunction function, const LaunchConfig& config, void** args,
                      std::string_view kernel_name, const ModuleInfo* module = nullptr);

}  // namespace kiln::client
