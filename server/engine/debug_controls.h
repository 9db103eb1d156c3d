// The diagnostic compile controls of a request (GetKernelRequest.debug) as they appear in an
// entry's key options, and back: each control is an option of the key, so each is its own
// cache entry, and an entry's options say which controls built it.
//   lineinfo      "-lineinfo"          passed to NVRTC (nvJitLink: -lineinfo)
//   device_debug  "-G"                 passed to NVRTC (nvJitLink: -g)
//   verbose_log   "--ptxas-options=-v" a mark in the key only: ptxas' report runs on every
//                                      compile (the kernel attributes come from it); a
//                                      verbose-log entry is the one whose log keeps it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kiln/v1/kernel.pb.h"

namespace kiln::server {

inline constexpr std::string_view kLineinfoOption = "-lineinfo";
inline constexpr std::string_view kDeviceDebugOption = "-G";
inline constexpr std::string_view kVerboseLogOption = "--ptxas-options=-v";

// The controls an entry with these key options was built with.
inline v1::DebugControls DebugControlsOf(const std::vector<std::string>& key_options) {
  v1::DebugControls debug;
  for (const std::string& option : key_options) {
    if (option == kLineinfoOption || option == "--generate-line-info") debug.set_lineinfo(true);
    if (option == kDeviceDebugOption || option == "--device-debug") debug.set_device_debug(true);
    if (option == kVerboseLogOption) debug.set_verbose_log(true);
  }
  return debug;
}

}  // namespace kiln::server
