#include "client/cli/toolchain_probe.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <vector>

namespace kiln::cli {
namespace {

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// Opens the first of `names` that loads; the error of the last try otherwise.
void* OpenFirst(const std::vector<std::string>& names, Probe* probe) {
  for (const auto& name : names) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      link_map* map = nullptr;
      probe->where = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name ? map->l_name
                                                                                                      : name;
      return handle;
    }
    const char* why = dlerror();
    probe->error = why != nullptr ? why : name + ": cannot load";
  }
  return nullptr;
}

std::string Version(unsigned major, unsigned minor) { return std::to_string(major) + "." + std::to_string(minor); }

}  // namespace

std::string CudaHome() {
  for (const char* name : {"KILN_CUDA_HOME", "CUDA_HOME"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && value[0] == '/') return value;
  }
  return "/usr/local/cuda";
}

Probe ProbeNvrtc(const std::string& cuda_home) {
  Probe p;
  void* handle = OpenFirst({"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", cuda_home + "/lib64/libnvrtc.so"}, &p);
  if (handle == nullptr) return p;
  using VersionFn = int (*)(int*, int*);  // nvrtcResult nvrtcVersion(int*, int*)
  auto version = reinterpret_cast<VersionFn>(dlsym(handle, "nvrtcVersion"));
  int major = 0, minor = 0;
  if (version != nullptr && version(&major, &minor) == 0) {
    p.found = true;
    p.version = Version(static_cast<unsigned>(major), static_cast<unsigned>(minor));
  } else {
    p.error = p.where + " has no working nvrtcVersion";
  }
  dlclose(handle);
  return p;
}

Probe ProbeNvJitLink(const std::string& cuda_home) {
  Probe p;
  void* handle = OpenFirst(
      {"libnvJitLink.so.13", "libnvJitLink.so.12", "libnvJitLink.so", cuda_home + "/lib64/libnvJitLink.so"}, &p);
  if (handle == nullptr) return p;
  // nvJitLinkResult nvJitLinkVersion(unsigned*, unsigned*)
  using VersionFn = int (*)(unsigned*, unsigned*);
  auto version = reinterpret_cast<VersionFn>(dlsym(handle, "nvJitLinkVersion"));
  unsigned major = 0, minor = 0;
  if (version != nullptr && version(&major, &minor) == 0) {
    p.found = true;
    p.version = Version(major, minor);
  } else {
    p.error = p.where + " has no working nvJitLinkVersion";
  }
  dlclose(handle);
  return p;
}

Probe ProbeCudaHeaders(const std::string& cuda_home) {
  Probe p;
  p.where = cuda_home + "/include";
  std::ifstream cuda_h(p.where + "/cuda.h");
  if (!cuda_h) {
    p.error = "no cuda.h in " + p.where;
    return p;
  }
  std::string line;
  while (std::getline(cuda_h, line)) {
    const std::string tag = "#define CUDA_VERSION ";
    if (line.rfind(tag, 0) == 0) {
      const int v = std::atoi(line.c_str() + tag.size());
      p.version = Version(static_cast<unsigned>(v / 1000), static_cast<unsigned>((v % 1000) / 10));
      break;
    }
  }
  for (const char* header : {"cuda_fp16.h", "cuda_bf16.h"}) {
    if (!Exists(p.where + "/" + header)) {
      p.error = std::string("no ") + header + " in " + p.where + " (NVRTC needs it for fp16/bf16)";
      return p;
    }
  }
  if (p.version.empty()) {
    p.error = "cuda.h in " + p.where + " has no CUDA_VERSION";
    return p;
  }
  p.found = true;
  return p;
}

}  // namespace kiln::cli
