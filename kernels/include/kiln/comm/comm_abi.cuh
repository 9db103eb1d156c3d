// The kernel ABI of Kiln's single-node all-reduce kernels: the structs the host passes, byte
// for byte. The host side (communicator, peer mapping, launches) mirrors these layouts; a
// change here is an ABI change of every comm entry point (docs/kernels-comm.md).
//
// Plain C layout: no constructors, no CUDA-only types, 64-bit pointers.
#pragma once

namespace kiln {
namespace comm {

// Ranks one communicator can hold (entries of KilnCommPeers).
constexpr int kMaxWorld = 8;
// Flag slots per rank: the largest grid.x any comm kernel may be launched with.
constexpr int kMaxBlocks = 256;

// KilnCommControl::error values.
constexpr unsigned kErrorNone = 0;
constexpr unsigned kErrorTimeout = 1;  // a barrier waited longer than timeout_ns for a peer
constexpr unsigned kErrorAborted = 2;  // the host raised `abort` while a barrier waited

}  // namespace comm
}  // namespace kiln

// Kernel parameter, by value (128 bytes): every rank's buffers as mapped in this process.
struct KilnCommPeers {
  // Rank i's data region for this call (entries >= world are unused).
  void* data[kiln::comm::kMaxWorld];
  // Rank i's flag array, unsigned int[kMaxBlocks][kMaxWorld]. Slot [b][j] of rank i's array
  // is written only by block b of rank j, and read only by block b of rank i.
  unsigned int* flags[kiln::comm::kMaxWorld];
};

// This rank's control word block, in host-mapped pinned memory (the kernel gets its device
// pointer). The host reads it after the kernel, or polls it while waiting.
struct KilnCommControl {
  unsigned int abort;        // set non-zero by the host when a peer is lost: stop waiting
  unsigned int error;        // 0 none, 1 timed out waiting for a peer, 2 aborted; first writer wins
  unsigned int error_peer;   // the rank the first failing block waited for
  unsigned int error_block;  // that block's blockIdx.x
};

static_assert(sizeof(void*) == 8, "the comm ABI assumes 64-bit device pointers");
static_assert(sizeof(KilnCommPeers) == 128, "KilnCommPeers is 8 data then 8 flag pointers");
static_assert(sizeof(KilnCommControl) == 16, "KilnCommControl is four unsigned ints");
