#include "server/jit/toolchain.h"

#include <nvJitLink.h>
#include <nvrtc.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/jit/kiln_version.h"

namespace kiln::server {
namespace {

// "#define CUDA_VERSION 13000" in <dir>/cuda.h; empty when the file or the line is missing.
std::string CudaHeadersVersion(const std::string& cuda_include_dir) {
  std::ifstream in(cuda_include_dir + "/cuda.h");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string hash, name, value;
    if (words >> hash >> name >> value && hash == "#define" && name == "CUDA_VERSION") return value;
  }
  return "";
}

}  // namespace

Toolchain DetectToolchain(const std::string& cuda_include_dir) {
  Toolchain toolchain;
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS) toolchain.nvrtc = absl::StrCat(major, ".", minor);
  unsigned link_major = 0, link_minor = 0;
  if (nvJitLinkVersion(&link_major, &link_minor) == NVJITLINK_SUCCESS) {
    toolchain.nvjitlink = absl::StrCat(link_major, ".", link_minor);
  }
  toolchain.cuda_headers = CudaHeadersVersion(cuda_include_dir);
  toolchain.kiln = KilnVersion();
  return toolchain;
}

const char* KilnVersion() { return KILN_VERSION_STRING; }

}  // namespace kiln::server
