// KernelParts: where a call of several kernels spends its time — each kernel's median
// duration and the median gap before it (from the previous kernel's end; negative where a
// programmatic dependent started early and overlapped it), over the calls whose kernels match
// the first call's, by name and order. CUPTI's records give it (cupti_timer.cpp); a row
// reports it as `kernel_parts`, e.g. for fused_moe's decode path:
//   "kiln_fused_moe_gate_up 12.31 | +0.84 kiln_fused_moe_down 7.02 | +0.91 kiln_moe_unpermute 2.05"
// A call whose kernels differ (another count or name) is left out and the text says how many
// calls it covers ("(96 of 100 calls)"); empty for calls of one kernel, which median_us says.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::bench {

struct KernelSpan {
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;
};

// `calls[i]`: call i's device work in any order (sorted here by start, then end).
std::string KernelParts(std::vector<std::vector<KernelSpan>> calls);

}  // namespace kiln::bench
