// The one place GPU tests ask whether they can run: a CUDA driver, a device, and the compute
// capability a feature needs. A test that cannot run here is skipped visibly (CTest's
// SKIP_RETURN_CODE), never passed; a supported device is never skipped.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::testing {

struct GpuInfo {
  int ordinal = 0;
  std::string name;
  int cc = 0;        // 90 for compute capability 9.0
  std::string arch;  // "sm_90": what the client asks the daemon for
  uint64_t total_memory = 0;
  int multiprocessors = 0;
  int driver_version = 0;  // CUDA version the driver supports: 13000
};

// Device 0's description when it exists and its compute capability is at least `min_cc`
// (e.g. 90 for Hopper) and, when `max_cc` is not 0, at most `max_cc`: arch-specific code
// (sm_90a: wgmma, TMA) runs only on its own family, so the gemm tests ask for 90..90.
// Otherwise prints "SKIPPED: <reason>" (no driver, no device, or the device's cc outside the
// range, naming both) and exits with KILN_TEST_SKIP_CODE.
GpuInfo RequireGpu(int min_cc = 0, int max_cc = 0);

// The same question without exiting: the reason it cannot run, or "" when it can.
std::string GpuUnavailableReason(int min_cc = 0, int max_cc = 0);

// The compute capabilities of the families of arch-specific code.
inline constexpr int kSm90aFamily = 90;  // sm_90a: H100, H200 (9.0)

// For multi-GPU tests: devices 0..count-1 exist and each has at least `min_cc`; otherwise
// skipped visibly as above ("needs 2 GPUs; the CUDA driver sees 1").
std::string GpusUnavailableReason(int count, int min_cc = 0);
void RequireGpus(int count, int min_cc = 0);

}  // namespace kiln::testing
