// batch_decode's launch-shape rule (its generator registers itself in
// batch_decode_generator.cpp; contract: kiln/decode/decode_contract.h). The device code takes
// the shape as template parameters (kiln/decode/batch_decode.cuh).
#pragma once

namespace kiln::kernels {

// How one batch_decode specialization runs: `block` threads (`block` / 32 warps, 16 tokens
// each per tile of `tile_tokens`), a `stages`-deep cp.async pipeline of K and V tiles in
// `dynamic_smem` bytes; the merge kernel runs `merge_block` threads per query head (its warps
// share the head's items: kiln/decode/merge_states.cuh).
struct BatchDecodeLaunchShape {
  int block = 128;
  int tile_tokens = 64;
  int stages = 3;
  int dynamic_smem = 0;
  int merge_block = 128;
  int merge_heads_per_block = 1;
};

// A stage (K and V tiles) is 16 KiB at head_dim 64 (4 warps, 64 tokens, 4 stages: 64 KiB),
// 32 KiB at 128 (4 warps, 64 tokens, 3 stages: 96 KiB) and 32 KiB at 256 (2 warps, 32 tokens,
// 3 stages: 96 KiB): two blocks per SM on sm_90's 227 KiB (three at 64), each with 2-3 tiles in
// flight while it computes one, and within sm_80's 163 KiB per block. (At 256, 4 warps would
// need 64 KiB stages: two stages, one block per SM, and no load in flight between a tile's
// arrival and the next issue.)
BatchDecodeLaunchShape ChooseBatchDecodeShape(int head_dim);

}  // namespace kiln::kernels
