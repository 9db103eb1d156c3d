// The activation family's generators (ops "silu_and_mul", "gelu_and_mul" and
// "gelu_tanh_and_mul"): params → JitSpec, and the launch-shape rule shared with the device
// code (kiln/activation/act_and_mul.cuh) and the client (grid = rows * ceil(d / cols_per_block)).
#pragma once

#include <memory>

#include "kernels/jit/op_generator.h"

namespace kiln::kernels {

// The largest half-row the kernel takes: d is an int in the kernel, and column indices stay
// below d + cols_per_block.
inline constexpr int kActAndMulMaxD = 1 << 30;

// How one specialization runs: `block` threads, each holding items_per_thread vectors of
// `vec` elements of each half in registers, so a block covers cols_per_block = block *
// items_per_thread * vec columns of one row.
struct ActAndMulLaunchShape {
  int vec = 1;
  int block = 128;
  int items_per_thread = 1;
  int cols_per_block = 128;
};

// 16 bytes: the widest access (vec 8 for fp16 and bf16).
int DefaultActAndMulVec(int dtype_bytes);

// 128 threads (4 warps: many small blocks fill every SM even at a few hundred rows) and 64
// bytes of each half per thread (4 vectors of 16 bytes, 8 of 8, 16 of 4), at most 16
// vectors (scalar 2-byte access: 32 bytes). A thread's 2 * items_per_thread loads are in
// flight together; ptxas (CUDA 13.0) keeps vec 8 at 48-55 registers, so 9-10 blocks share an SM.
ActAndMulLaunchShape ChooseActAndMulShape(int vec, int dtype_bytes);

std::unique_ptr<OpGenerator> MakeSiluAndMulGenerator();      // "silu_and_mul"
std::unique_ptr<OpGenerator> MakeGeluAndMulGenerator();      // "gelu_and_mul"
std::unique_ptr<OpGenerator> MakeGeluTanhAndMulGenerator();  // "gelu_tanh_and_mul"

}  // namespace kiln::kernels
