// CubinInfo: what a cubin's ELF says about its kernels: which kernels it holds (global FUNC
// symbols with a .text.<name> section), their registers and stack (EIATTR_REGCOUNT and
// EIATTR_MIN_STACK_SIZE records of the global .nv.info section, keyed by symbol index), the
// __launch_bounds__ maximum (EIATTR_MAX_THREADS in .nv.info.<kernel>), the size of constant
// bank 0 (.nv.constant0.<kernel>, ptxas' cmem[0]) and of the shared section. The cubin is the
// authority on what exists; ptxas' -v report adds spills and is not always printed (NVRTC on
// some machines returns a log without it).
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace kiln::server {

struct CubinKernelInfo {
  bool is_kernel = false;         // a global function with code in the cubin
  int max_threads = 0;            // x*y*z of __launch_bounds__ / .maxntid; 0 when the kernel has none
  int const0_bytes = -1;          // size of .nv.constant0.<kernel>; -1 when the section is absent
  int registers = -1;             // EIATTR_REGCOUNT; -1 when absent
  int stack_bytes = -1;           // EIATTR_MIN_STACK_SIZE; -1 when absent
  int shared_section_bytes = -1;  // size of .nv.shared.<kernel>, which on sm_90+ also holds
                                  // the 1 KiB the system reserves; -1 when absent
};

// Kernel name → info, for every name that has a kernel symbol or one of the sections above. An unreadable or non-ELF
// input gives an empty map (the attributes then rest on ptxas' report alone).
std::map<std::string, CubinKernelInfo, std::less<>> ReadCubinKernelInfo(std::string_view cubin);

}  // namespace kiln::server
