// The host's copy of the all-reduce kernels' parameter structs and memory layout
// (kernels/include/kiln/comm/all_reduce.cuh). The client cannot include the device headers
// (they are read by NVRTC at run time), so the layouts are repeated here and pinned by
// static_asserts; a change on either side must change both.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::client::comm {

inline constexpr int kMaxWorld = 8;    // ranks a communicator can have
inline constexpr int kMaxBlocks = 256;  // flag slots per rank: the most blocks a launch may use

// Kernel parameter, by value: every rank's data region for this call and flag array, as
// mapped in this process (index = rank; entries >= world size unused).
struct KernelPeers {
  void* data[kMaxWorld];
  unsigned int* flags[kMaxWorld];  // unsigned int[kMaxBlocks][kMaxWorld]; [b][j] written by rank j's block b
};
static_assert(sizeof(KernelPeers) == 128, "KilnCommPeers is 128 bytes on the device");

// This rank's control words, in host-mapped pinned memory (the kernel gets the device
// pointer). The host raises `abort` when a peer is lost; a kernel that gives up writes the
// rest.
struct KernelControl {
  unsigned int abort;
  unsigned int error;        // one of KernelError
  unsigned int error_peer;   // the rank the kernel was waiting for
  unsigned int error_block;  // the block that gave up
};
static_assert(sizeof(KernelControl) == 16, "KilnCommControl is 16 bytes on the device");

enum KernelError : unsigned int { kKernelOk = 0, kKernelTimedOut = 1, kKernelAborted = 2 };

// One rank's symmetric allocation: [flags | epochs | data...]. Flags are written by peers;
// epochs (one barrier counter per block) only by this rank's kernels. Both start zeroed.
inline constexpr size_t kFlagsBytes = sizeof(unsigned int) * kMaxBlocks * kMaxWorld;
inline constexpr size_t kEpochsOffset = kFlagsBytes;
inline constexpr size_t kEpochsBytes = sizeof(unsigned int) * kMaxBlocks;
inline constexpr size_t kDataOffset = 64 * 1024;  // the data region starts 64 KiB in
static_assert(kEpochsOffset + kEpochsBytes <= kDataOffset, "control area fits before the data");

}  // namespace kiln::client::comm
