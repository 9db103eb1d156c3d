// BlockBarrier: the per-block, flag-based barrier across the ranks of a communicator.
//
// Block b of rank r arrives at step s of a call by storing epoch + s (release, system scope)
// into slot [b][r] of every rank's flag array, then waits (acquire, system scope) until its
// own slots [b][j] reach epoch + s for every rank j. Only blocks with the same index meet:
// the comm kernels partition their elements so that block b of a rank only reads what block
// b of the writing rank produced (see all_reduce.cuh for why that suffices).
//
// epochs[b] (this rank's memory, only this rank touches it) holds block b's epoch between
// calls; every call advances it by kStepsPerCall whatever barriers the kernel uses, so
// one-shot and two-shot calls may alternate. Flags only grow, and a peer is at most one
// barrier ahead (it cannot pass a barrier this block has not reached), so "at or past",
// compared wrap-safe as (int)(flag - target) >= 0, is exact.
//
// A wait gives up, instead of hanging, when it takes longer than timeout_ns (0: never) or
// when the host raises control->abort. The first block to give up records why in
// *control; the block then leaves the kernel, every thread of it, and touches no peer data.
// After a give-up the flags and epochs of the communicator no longer agree across ranks:
// the host must reset them (zero every rank's flags and epochs) before another call.
#pragma once

#include "kiln/comm/comm_contract.h"

namespace kiln {
namespace comm {

enum BarrierStep : unsigned {
  kStartBarrier = 1,  // every rank's input is in its region
  kMidBarrier = 2,    // two-shot: every rank's reduced chunk is in its region
  kEndBarrier = 3,    // every rank has finished reading the others' regions
};
constexpr unsigned kStepsPerCall = 3;

// control->abort lives in host memory: one read is a PCIe round trip, so it is polled only
// every this many spins of a wait.
constexpr unsigned kAbortPollSpins = 1024;

namespace detail {

__device__ __forceinline__ void StoreReleaseSys(unsigned* p, unsigned value) {
  asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(value) : "memory");
}

__device__ __forceinline__ unsigned LoadAcquireSys(const unsigned* p) {
  unsigned value;
  asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(value) : "l"(p) : "memory");
  return value;
}

__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// array[i] for a rank i known only at run time, as selects over the first kWorld entries:
// the kernel's parameter struct stays in the constant bank instead of being copied to the
// stack for a dynamic index. The empty asm hides that j is a constant: knowing i == j, the
// compiler would otherwise rewrite array[j] as array[i], the very dynamic index avoided.
template <int kWorld, typename P>
__device__ __forceinline__ P PickRank(const P (&array)[kMaxWorld], int i) {
  P picked = array[0];
#pragma unroll
  for (int j = 1; j < kWorld; ++j) {
    int opaque_j = j;
    asm("" : "+r"(opaque_j));
    picked = i == opaque_j ? array[j] : picked;
  }
  return picked;
}

// One flag per block: set by a waiting lane that gave up, read by the other lanes (so they
// stop waiting) and, after the barrier's last __syncthreads, by every thread.
__device__ __forceinline__ volatile int* BlockGaveUpFlag() {
  __shared__ int gave_up;
  return &gave_up;
}

}  // namespace detail

template <int kWorld>
class BlockBarrier {
  static_assert(kWorld >= 1 && kWorld <= kMaxWorld, "a communicator has 1..kMaxWorld ranks");

 public:
  // Every thread of the block constructs it at kernel start, before any Arrive.
  __device__ __forceinline__ BlockBarrier(const KilnCommPeers& peers, unsigned* epochs, KilnCommControl* control,
                                          int rank, unsigned long long timeout_ns)
      : epochs_(epochs),
        control_(control),
        timeout_ns_(timeout_ns),
        gave_up_(detail::BlockGaveUpFlag()),
        epoch_(epochs[blockIdx.x]) {
    if (threadIdx.x == 0) *gave_up_ = 0;  // published by Arrive's first __syncthreads
    if (threadIdx.x < kWorld) {
      const int peer = threadIdx.x;
      // Lane `peer` signals slot [b][rank] of the peer's array and waits on slot [b][peer]
      // of this rank's own array.
      signal_ = detail::PickRank<kWorld>(peers.flags, peer) + blockIdx.x * kMaxWorld + rank;
      wait_ = detail::PickRank<kWorld>(peers.flags, rank) + blockIdx.x * kMaxWorld + peer;
    }
  }

  // Whether block b of every rank has arrived at `step` of this call. False when this block
  // gave up: every thread gets the same answer and must return from the kernel at once.
  // Every thread of the block must call it (it holds two __syncthreads).
  __device__ __forceinline__ bool Arrive(BarrierStep step) {
    const unsigned target = epoch_ + step;
    // Orders every access of this block's threads so far (writes into this rank's region,
    // reads of the peers' regions) before lane 0..W-1's release below: bar.sync makes them
    // causally precede the release, and release is cumulative over them.
    __syncthreads();
    if (threadIdx.x < kWorld) {
      detail::StoreReleaseSys(signal_, target);
      Wait(target, static_cast<int>(threadIdx.x));
    }
    // The lanes' acquires (and any give-up) precede every thread's next access.
    __syncthreads();
    return *gave_up_ == 0;
  }

  // After the END barrier: block b's epoch for the next call (thread 0).
  __device__ __forceinline__ void Finish() {
    if (threadIdx.x == 0) epochs_[blockIdx.x] = epoch_ + kStepsPerCall;
  }

 private:
  __device__ __forceinline__ void Wait(unsigned target, int peer) {
    const unsigned long long start = detail::GlobalTimerNs();
    for (unsigned spins = 1;; ++spins) {
      if (static_cast<int>(detail::LoadAcquireSys(wait_) - target) >= 0) return;
      if (*gave_up_ != 0) return;  // a sibling lane gave up: this block is leaving
      if (spins % kAbortPollSpins == 0 && *static_cast<volatile const unsigned*>(&control_->abort) != 0) {
        GiveUp(kErrorAborted, peer);
        return;
      }
      if (timeout_ns_ != 0 && detail::GlobalTimerNs() - start > timeout_ns_) {
        GiveUp(kErrorTimeout, peer);
        return;
      }
    }
  }

  // Never __trap(): that would kill the context, and the host must be able to recover.
  __device__ __forceinline__ void GiveUp(unsigned code, int peer) {
    *gave_up_ = 1;
    if (atomicCAS(&control_->error, kErrorNone, code) == kErrorNone) {
      volatile KilnCommControl* control = control_;
      control->error_peer = static_cast<unsigned>(peer);
      control->error_block = blockIdx.x;
      __threadfence_system();
    }
  }

  unsigned* epochs_;
  KilnCommControl* control_;
  unsigned long long timeout_ns_;
  volatile int* gave_up_;
  unsigned epoch_;
  unsigned* signal_ = nullptr;
  const unsigned* wait_ = nullptr;
};

}  // namespace comm
}  // namespace kiln
