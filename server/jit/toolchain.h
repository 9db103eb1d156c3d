// Toolchain: the versions of what compiles kernels, as they enter keys and manifests.
#pragma once

#include <string>

namespace kiln::server {

struct Toolchain {
  std::string nvrtc;         // "13.0" (nvrtcVersion)
  std::string nvjitlink;     // "13.0" (nvJitLinkVersion)
  std::string cuda_headers;  // CUDA_VERSION from <cuda_include_dir>/cuda.h: "13000"
  std::string kiln;          // VERSION
};

// Reads the versions once (NVRTC and nvJitLink are linked; cuda.h is parsed from the folder).
Toolchain DetectToolchain(const std::string& cuda_include_dir);

// The Kiln version string from VERSION (compiled in).
const char* KilnVersion();

}  // namespace kiln::server
