// The comm family's launch rules (ops "all_reduce" and "all_reduce_add_rmsnorm", whose
// generators register themselves in all_reduce_generator.cpp; contract and grid rules:
// kiln/comm/comm_contract.h, docs/kernels-comm.md).
#pragma once

namespace kiln::kernels {

inline constexpr int kAllReduceBlock = 512;     // the block of op all_reduce
inline constexpr int kAllReduceMaxBlocks = 64;  // its max_blocks

// all_reduce_add_rmsnorm's block: about 4 vectors of the row per thread, in whole warps,
// 32..512 threads (a thread holds its vectors in registers: at most 32 at hidden 16384).
int AllReduceAddRmsNormBlock(int hidden, int vec);
// Its max_blocks: 64 SMs' worth of co-resident blocks at 512 threads per SM (the kernel's
// __launch_bounds__(block, 512 / block) guarantees that residency), at most kMaxBlocks.
int AllReduceAddRmsNormMaxBlocks(int block);

}  // namespace kiln::kernels
