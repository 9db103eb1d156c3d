// The comm family's generators (ops "all_reduce" and "all_reduce_add_rmsnorm"): params →
// JitSpec, and the launch rules that the host side mirrors. Device code and contract:
// kernels/include/kiln/comm/, docs/kernels-comm.md.
#pragma once

#include <memory>

#include "kernels/jit/op_generator.h"

namespace kiln::kernels {

// The device ABI's limits (kiln/comm/comm_abi.cuh: kMaxWorld, kMaxBlocks).
inline constexpr int kCommMaxWorld = 8;
inline constexpr int kCommMaxBlocks = 256;

inline constexpr int kAllReduceMinWorld = 2;
inline constexpr int kAllReduceBlock = 512;     // launch hint "block" of op all_reduce
inline constexpr int kAllReduceMaxBlocks = 64;  // launch hint "max_blocks" of op all_reduce
inline constexpr int kAllReduceAddRmsNormMaxHidden = 16384;

// The grid.x of an all_reduce launch: one thread per vector of the vectors one rank reduces
// (one-shot: all nvec = n / vec; two-shot: its chunk, ceil(nvec / world)), in blocks of
// `block`, clamped to 1..max_blocks (the launch hints). The host must launch exactly this
// on every rank (it needs the same grid everywhere; n, vec, world and the kernel are equal
// on every rank too). Any grid in 1..max_blocks would be correct; this one is the rule.
constexpr long long AllReduceGrid(long long n, int vec, int world, bool two_shot, int block, int max_blocks) {
  const long long nvec = n / vec;
  const long long work = two_shot ? (nvec + world - 1) / world : nvec;
  const long long blocks = (work + block - 1) / block;
  return blocks < 1 ? 1 : blocks > max_blocks ? max_blocks : blocks;
}

// The grid.x of an all_reduce_add_rmsnorm launch: one block per row, clamped to
// 1..max_blocks (launch hint); the same on every rank.
constexpr long long AllReduceAddRmsNormGrid(long long rows, int max_blocks) {
  return rows < 1 ? 1 : rows > max_blocks ? max_blocks : rows;
}

// all_reduce's default vec: 16 bytes.
int DefaultAllReduceVec(int dtype_bytes);
// all_reduce_add_rmsnorm's default vec: the largest power of two with vec * dtype_bytes
// <= 16 that divides hidden.
int DefaultAllReduceAddRmsNormVec(int hidden, int dtype_bytes);

// all_reduce_add_rmsnorm's block: about 4 vectors of the row per thread, in whole warps,
// 32..512 threads (a thread holds its vectors in registers: at most 32 at hidden 16384).
int AllReduceAddRmsNormBlock(int hidden, int vec);
// Its max_blocks: 64 SMs' worth of co-resident blocks at 512 threads per SM (the kernel's
// __launch_bounds__(block, 512 / block) guarantees that residency), at most kCommMaxBlocks.
int AllReduceAddRmsNormMaxBlocks(int block);

std::unique_ptr<OpGenerator> MakeAllReduceGenerator();             // "all_reduce"
std::unique_ptr<OpGenerator> MakeAllReduceAddRmsNormGenerator();   // "all_reduce_add_rmsnorm"

}  // namespace kiln::kernels
