// The op contract of the comm family (kiln/common/op_contract.h says what a contract is):
// Kiln's single-node all-reduce kernels over peer-mapped (NVLink P2P) memory, docs/kernels-comm.md.
//
//   all_reduce              sum over ranks (entries kiln_all_reduce_one_shot, _two_shot)
//   all_reduce_add_rmsnorm  sum over ranks + residual add + RMSNorm, per row
//
// Params: dtype (fp32, fp16, bf16), world_size (kMinWorld..kMaxWorld), hidden (add_rmsnorm
// only, 1..kMaxAddRmsNormHidden), vec (kParamVec; the same on every rank).
// Launch: block as hinted, no dynamic shared memory, grid.x = AllReduceGrid(...) or
// AllReduceAddRmsNormGrid(...) below with max_blocks the hint: every rank must launch the same
// grid (same-index blocks of the ranks meet at barriers), and all blocks must be co-resident.
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace comm {

constexpr const char* kAllReduceOp = "all_reduce";
constexpr const char* kOneShotEntry = "kiln_all_reduce_one_shot";
constexpr const char* kTwoShotEntry = "kiln_all_reduce_two_shot";
constexpr const char* kAllReduceAddRmsNormOp = "all_reduce_add_rmsnorm";
constexpr const char* kAddRmsNormEntry = "kiln_all_reduce_add_rmsnorm";

constexpr const char* kParamWorldSize = "world_size";
constexpr const char* kParamHidden = "hidden";
constexpr int kMinWorld = 2;
constexpr int kMaxAddRmsNormHidden = 16384;

// Ranks one communicator can hold (entries of KilnCommPeers).
constexpr int kMaxWorld = 8;
// Flag slots per rank: the largest grid.x any comm kernel may be launched with.
constexpr int kMaxBlocks = 256;

// KilnCommControl::error values.
constexpr unsigned kErrorNone = 0;
constexpr unsigned kErrorTimeout = 1;  // a barrier waited longer than timeout_ns for a peer
constexpr unsigned kErrorAborted = 2;  // the host raised `abort` while a barrier waited

// One rank's symmetric allocation: [flags | epochs | data...]. Flags (unsigned
// int[kMaxBlocks][kMaxWorld]) are written by peers; epochs (one barrier counter per block)
// only by this rank's kernels. Both start zeroed. The data region starts kDataOffset bytes in.
constexpr unsigned long long kFlagsBytes = sizeof(unsigned int) * kMaxBlocks * kMaxWorld;
constexpr unsigned long long kEpochsOffset = kFlagsBytes;
constexpr unsigned long long kEpochsBytes = sizeof(unsigned int) * kMaxBlocks;
constexpr unsigned long long kDataOffset = 64 * 1024;
static_assert(kEpochsOffset + kEpochsBytes <= kDataOffset, "the control area fits before the data");

// The grid.x of an all_reduce launch: one thread per vector of the vectors one rank reduces
// (one-shot: all nvec = n / vec; two-shot: its chunk, ceil(nvec / world)), in blocks of
// `block`, clamped to 1..max_blocks (the launch hints). Any grid in 1..max_blocks would be
// correct; this one is the rule every rank follows.
KILN_CONTRACT_FUNCTION long long AllReduceGrid(long long n, int vec, int world, bool two_shot, int block,
                                               int max_blocks) {
  const long long nvec = n / vec;
  const long long work = two_shot ? (nvec + world - 1) / world : nvec;
  const long long blocks = (work + block - 1) / block;
  return blocks < 1 ? 1 : blocks > max_blocks ? max_blocks : blocks;
}

// The grid.x of an all_reduce_add_rmsnorm launch: one block per row, clamped to
// 1..max_blocks (launch hint); the same on every rank.
KILN_CONTRACT_FUNCTION long long AllReduceAddRmsNormGrid(long long rows, int max_blocks) {
  return rows < 1 ? 1 : rows > max_blocks ? max_blocks : rows;
}

}  // namespace comm
}  // namespace kiln

// Every rank's buffers as mapped in this process (128 bytes).
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
  unsigned int error;        // kErrorNone, kErrorTimeout or kErrorAborted; first writer wins
  unsigned int error_peer;   // the rank the first failing block waited for
  unsigned int error_block;  // that block's blockIdx.x
};

static_assert(sizeof(KilnCommPeers) == 128, "KilnCommPeers is 8 data then 8 flag pointers");
static_assert(sizeof(KilnCommControl) == 16, "KilnCommControl is four unsigned ints");

namespace kiln {
namespace comm {

// kiln_all_reduce_one_shot's and kiln_all_reduce_two_shot's parameter, by value. copy_input:
// push mode (input is this rank's ordinary memory), else pull mode (input is this rank's data
// region). timeout_ns: how long a barrier waits for a peer (0: forever).
struct AllReduceParams {
  KilnCommPeers peers;
  unsigned int* epochs;  // this rank's epochs (its allocation + kEpochsOffset)
  KilnCommControl* control;
  const void* input;
  void* output;
  long long n;  // elements
  int rank;
  int copy_input;
  unsigned long long timeout_ns;
};
static_assert(sizeof(AllReduceParams) == 184, "AllReduceParams: peers, 4 pointers, n, 2 ints, timeout");

// kiln_all_reduce_add_rmsnorm's parameter, by value: residual += sum over ranks of input;
// output = rms_norm(residual) * weight, rows of the specialization's hidden, dense.
struct AllReduceAddRmsNormParams {
  KilnCommPeers peers;
  unsigned int* epochs;
  KilnCommControl* control;
  const void* input;
  void* residual;
  const void* weight;
  void* output;
  long long rows;
  float eps;
  int rank;
  int copy_input;
  unsigned long long timeout_ns;
};
static_assert(sizeof(AllReduceAddRmsNormParams) == 208, "AllReduceAddRmsNormParams: peers, 6 pointers, rows, ...");

}  // namespace comm
}  // namespace kiln
