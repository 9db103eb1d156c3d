// fused_moe's decode path in one grid (kiln/moe/moe_contract.h, FusedMoeOneGridParams;
// docs/kernels-moe.md, "One grid"): the gate-up and the down GEMV of fused_moe_gemv.cuh as the
// blocks of a single launch, so that down blocks stream w2 while other experts' gate-up blocks
// still stream w13, instead of the down GEMV's grid starting as the gate-up GEMV's ends.
//
// At one token of Qwen3-30B-A3B (8 experts of 9.4 MB) the two launches spend about 9 us of an
// H200's 25 on the down GEMV's 25 MB (6 us of copy): its 512 blocks are resident only as the
// gate-up GEMV's 384 leave, then a second wave of 116 follows that could not prefetch. Here every
// block's work comes from a ticket, taken in order (OneGridWork, moe_contract.h): per chosen
// expert by rank, its gate-up blocks, then the down blocks of the expert down_lag ranks before.
// A down block asks L2 for its rows, then waits (one thread, ld.acquire.gpu) until its expert's
// gate-up blocks have all counted themselves, each after its act stores and a fence (the "last
// block" pattern of the CUDA C++ Programming Guide, "Memory Fence Functions"), then reads act from
// L2 (ld.global.cg: written in this grid). The products and their order are those of the two GEMV
// launches: the same bits.
//
// Measured on an H100 (2026-12-07): slower than the two launches at every order (Qwen3-30B-A3B at
// one token 30.1 -> 35.2-38.3 us): waiting down blocks hold slots the gate-up blocks need, and each
// block's prologue runs after it gets its slot. Off by default (KILN_FUSED_MOE_ONE_GRID).
//
// The tickets keep it from deadlock whatever order the hardware starts blocks in: a block holds a
// down ticket of an expert only after every gate-up ticket of that expert went to a block that is
// running (tickets are taken in order), and a gate-up block never waits.
#pragma once

#include "kiln/moe/fused_moe_gemv.cuh"

namespace kiln {
namespace moe {

// An acquire load at GPU scope (PTX ISA, "Memory Consistency Model", ld.acquire): what the
// releasing blocks wrote before their counted arrival is visible to this thread after it.
__device__ __forceinline__ unsigned LoadAcquireGpu(const unsigned* address) {
  unsigned value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

// kiln_fused_moe_one_grid_prepare (one block): after the kernels before it (the previous call's
// combine reads slot_to_row, and its one grid used the counters), zeroes the ticket and the
// arrival counts, and writes slot_to_row (s, or -1 for a slot without a row) for the combine.
// It lets the one grid launch first thing: that grid's blocks wait for this one to complete.
__device__ __forceinline__ void OneGridPrepare(const FusedMoeGemvParams& p, const FusedMoeOneGridParams& g) {
  GridDependencyWait();
  GridDependencyLaunchDependents();
  const int tid = static_cast<int>(threadIdx.x);
  for (int i = tid; i <= g.expert_blocks; i += kGemvBlock) g.counters[i] = 0u;
  const int slots = static_cast<int>(p.tokens) * p.top_k;
  for (int s = tid; s < slots; s += kGemvBlock) {
    const int t = s / p.top_k;
    const int id = p.topk_ids[t * p.ids_stride + (s - t * p.top_k)];
    p.slot_to_row[s] = id >= 0 && id < p.experts ? s : -1;
  }
}

// A down block of the one grid: column block `block_x` of y for expert e (rank `rank`), once the
// expert's gate-up blocks have all arrived. Every thread reaches the barrier.
template <typename T>
__device__ __forceinline__ void OneGridDown(const FusedMoeGemvParams& p, const FusedMoeOneGridParams& g,
                                            const GemvShared& sh, int e, int rank, int block_x) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int col0 = WarpFirstColumn<false>(block_x, warp);
  const bool works = col0 < p.n;  // n is a multiple of 8: a warp's 4 columns are all in or all out
  const char* w[kGemvWeightRows];
  WarpWeightRows<T, false>(p, e, col0, w);
  if (works) {
    const unsigned prefetch = DownPrefetchBytes<T>(p);
#pragma unroll
    for (int i = 0; i < kGemvWeightRows; ++i)
      if (lane == i) PrefetchRowToL2(w[i], prefetch);
  }
  if (threadIdx.x == 0) {
    const unsigned* arrived = g.counters + 1 + rank;
    while (LoadAcquireGpu(arrived) < static_cast<unsigned>(g.gate_up_blocks)) __nanosleep(100);
  }
  __syncthreads();  // the other threads' reads of act come after thread 0's acquire
  if (works) ExpertPasses<T, false, true>(p, sh, w, col0, lane);
}

// A gate-up block of the one grid: column block `block_x` of act for expert e, then its arrival
// at counters[1 + rank] once every thread's stores are visible device-wide.
template <typename T>
__device__ __forceinline__ void OneGridGateUp(const FusedMoeGemvParams& p, const FusedMoeOneGridParams& g,
                                              const GemvShared& sh, int e, int rank, int block_x) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int col0 = WarpFirstColumn<true>(block_x, warp);
  const char* w[kGemvWeightRows];
  WarpWeightRows<T, true>(p, e, col0, w);
  if (col0 < p.n) ExpertPasses<T, true>(p, sh, w, col0, lane);
  // Each thread's fence makes its stores visible device-wide before the barrier (the fold's
  // pattern); thread 0's fence after the barrier makes its add a release of every thread's stores
  // in the PTX memory model's terms too (they precede it through the barrier).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(g.counters + 1 + rank, 1u);
  }
}

// kiln_fused_moe_one_grid's block. It waits for the prepare launch (and through it for the
// kernels before: x), lets the combine launch, takes its ticket and finds its expert and slots.
// Every thread waits, so that the combine's wait (which covers this grid only) also comes after
// the prepare launch's slot_to_row. The two parameters are read only in the branch of their role,
// so NVRTC keeps each in the parameter bank.
template <typename T>
__device__ __forceinline__ void OneGridGemvs(const FusedMoeGemvParams& gate_up, const FusedMoeGemvParams& down,
                                             const FusedMoeOneGridParams& g) {
  static_assert(sizeof(T) == 2, "fused_moe's element types are 16-bit");
  __shared__ GemvShared sh;
  __shared__ unsigned ticket;
  GridDependencyWait();
  GridDependencyLaunchDependents();
  if (threadIdx.x == 0) ticket = atomicAdd(g.counters, 1u);
  __syncthreads();
  bool is_gate_up;
  int rank, block_x;  // rank < expert_blocks: the grid has (gate_up_blocks + down_blocks) x expert_blocks tickets
  OneGridWork(ticket, g.gate_up_blocks, g.down_blocks, g.expert_blocks, g.down_lag, &is_gate_up, &rank, &block_x);
  const int e = FindExpertSlots<true>(gate_up, sh, rank);
  if (e < 0) return;  // no expert of this rank: none of its blocks works or waits
  if (is_gate_up) OneGridGateUp<T>(gate_up, g, sh, e, rank, block_x);
  else OneGridDown<T>(down, g, sh, e, rank, block_x);
}

}  // namespace moe
}  // namespace kiln
