// The activation family's launch-shape rule (ops "silu_and_mul", "gelu_and_mul" and
// "gelu_tanh_and_mul", whose generators register themselves in act_and_mul_generator.cpp;
// contract: kiln/activation/activation_contract.h, grid = rows * ceil(d / cols_per_block)).
#pragma once

namespace kiln::kernels {

// How one specialization runs: `block` threads, each holding items_per_thread vectors of
// `vec` elements of each half in registers, so a block covers cols_per_block = block *
// items_per_thread * vec columns of one row.
struct ActAndMulLaunchShape {
  int vec = 1;
  int block = 128;
  int items_per_thread = 1;
  int cols_per_block = 128;
};

// 128 threads (4 warps: many small blocks fill every SM even at a few hundred rows) and 64
// bytes of each half per thread (4 vectors of 16 bytes, 8 of 8, 16 of 4), at most 16
// vectors (scalar 2-byte access: 32 bytes). A thread's 2 * items_per_thread loads are in
// flight together; ptxas (CUDA 13.0) keeps vec 8 at 48-55 registers, so 9-10 blocks share an SM.
ActAndMulLaunchShape ChooseActAndMulShape(int vec, int dtype_bytes);

}  // namespace kiln::kernels
