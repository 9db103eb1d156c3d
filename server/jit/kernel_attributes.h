// KernelAttributes: what ptxas reported about each kernel of a cubin, parsed from its
// verbose (-v) output, plus the limits derived from it for the target arch.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/jit/arch.h"

namespace kiln::server {

struct KernelAttributes {
  std::string name;
  int registers = 0;
  int static_shared_bytes = 0;
  int max_dynamic_shared_bytes = 0;  // opt-in shared memory of the arch minus static
  int max_threads_per_block = 0;     // from registers (and __launch_bounds__ when reported)
  int stack_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int const_bytes = 0;               // cmem[0]
};

// Parses "ptxas info : Compiling entry function 'x' for 'sm_90a'", "Function properties for
// x: N bytes stack frame, N bytes spill stores, N bytes spill loads" and "Used N registers,
// N bytes smem, N bytes cmem[0]" lines for each of `entries`.
std::vector<KernelAttributes> ParsePtxasInfo(std::string_view log,
                                            const std::vector<std::string>& entries,
                                            const kernels::GpuArch& arch);

}  // namespace kiln::server
