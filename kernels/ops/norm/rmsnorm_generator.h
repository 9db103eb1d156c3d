// The norm family's launch-shape rule (ops "rmsnorm" and "fused_add_rmsnorm", whose generators
// register themselves in rmsnorm_generator.cpp; contract: kiln/norm/norm_contract.h). The
// device code takes the shape as template parameters (kiln/norm/rmsnorm.cuh).
#pragma once

namespace kiln::kernels {

// How one specialization runs: threads_per_row threads hold a row (items_per_thread vectors
// of vec elements each, in registers), rows_per_block rows per block of `block` threads.
struct RmsNormLaunchShape {
  int vec = 1;
  int threads_per_row = 1;
  int rows_per_block = 1;
  int block = 32;
  int items_per_thread = 1;
};

// The shape for a row of hidden / vec vectors of vec * dtype_bytes bytes:
//  - up to 32 vectors: a power-of-two group of lanes per row (one vector each), 128 threads
//    and so 128 / group rows per block;
//  - up to 128 vectors: one warp per row (at most 4 vectors per lane), 4 rows per block;
//  - up to 4096 vectors: one row per block, threads = vectors / 4 rounded up to whole warps
//    (at most 4 vectors per thread);
//  - more: 1024 threads, or 512 when the row would take more than 24 data registers of a
//    1024-thread block's 64 (__launch_bounds__(1024)) but fits in 96 of 512 threads' 128:
//    bf16/fp16 hidden 65536 runs 512 threads x 16 vectors without spills. Rows larger than
//    the register file allows (fp32 hidden 65536 is 256 KB, all of an SM's registers) stay
//    at 1024 threads and spill a little to local memory.
RmsNormLaunchShape ChooseRmsNormShape(int hidden, int vec, int dtype_bytes);

}  // namespace kiln::kernels
