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
  int const_bytes = 0;  // cmem[0]
};

// The lines of a compile log, without their newlines (Debian's abseil splits only its own
// absl::string_view, so this is ours).
std::vector<std::string_view> LogLines(std::string_view log);

// Parses "ptxas info : Compiling entry function 'x' for 'sm_90a'", "Function properties for
// x: N bytes stack frame, N bytes spill stores, N bytes spill loads" and "Used N registers,
// N bytes smem, N bytes cmem[0]" lines for each of `entries`. Returns one element per entry
// that the log reports, in the order of `entries`; an entry the log does not mention is
// left out (the caller decides whether that is an error). max_threads_per_block comes from
// the registers alone here (see MaxThreadsForRegisters); NvrtcCompiler caps it by the
// cubin's launch bounds (cubin_info.h) and fills const_bytes where ptxas is silent (it
// prints no cmem[0] for sm_90 and later).
std::vector<KernelAttributes> ParsePtxasInfo(std::string_view log, const std::vector<std::string>& entries,
                                             const kernels::GpuArch& arch);

// Every kernel ("entry function") the log reports, in log order.
std::vector<std::string> PtxasEntryFunctions(std::string_view log);

// The largest block the register file admits for a kernel of `registers` per thread, by the
// rules of CUDA's occupancy calculator (cuda_occupancy.h, cudaOccMaxBlocksPerSMRegsLimit,
// the same for every cc from 7.0 to 12.x): registers are allocated per warp, rounded up to
// 256; each of the 4 SM sub-partitions holds 65536 / 4 registers, so
//   warps = 4 * floor(16384 / roundup(registers * 32, 256)),  threads = min(1024, 32 * warps).
// 0 registers (not reported) gives 1024. Examples: 64 → 1024, 128 → 512, 255 → 256.
int MaxThreadsForRegisters(int registers);

// The opt-in shared memory limit of one block (cudaDevAttrMaxSharedMemoryPerBlockOptin) by
// compute capability, from the CUDA C++ Programming Guide's table of technical
// specifications (and CUTLASS's sm100/sm120 capacity constants): 7.5: 64 KB; 8.0, 8.7:
// 163 KB; 8.6, 8.8, 8.9: 99 KB; 9.0, 10.x, 11.0: 227 KB; 12.x: 99 KB. An unknown cc
// gives 48 KB, the limit without opt-in.
int MaxOptInSharedBytes(int cc);

}  // namespace kiln::server
