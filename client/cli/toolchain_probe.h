// What `kiln doctor` finds of the CUDA toolkit kilnd compiles with: NVRTC and nvJitLink
// (dlopen'ed and asked for their versions, never linked) and the CUDA headers.
#pragma once

#include <string>

namespace kiln::cli {

struct Probe {
  bool found = false;
  std::string where;    // library path or folder
  std::string version;  // "13.0"
  std::string error;    // why not found
};

// KILN_CUDA_HOME, else CUDA_HOME, else /usr/local/cuda (as kilnd chooses).
std::string CudaHome();

Probe ProbeNvrtc(const std::string& cuda_home);
Probe ProbeNvJitLink(const std::string& cuda_home);
// <cuda_home>/include: cuda.h's CUDA_VERSION ("13.0"), and cuda_bf16.h/cuda_fp16.h present.
Probe ProbeCudaHeaders(const std::string& cuda_home);

}  // namespace kiln::cli
