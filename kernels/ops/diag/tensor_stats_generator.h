// The launch shape of the diagnostics op tensor_stats (its generator registers itself in
// tensor_stats_generator.cpp; contract: kiln/diag/diag_contract.h, grid = min(ceil(numel /
// block), max_blocks)).
#pragma once

namespace kiln::kernels {

// A grid-stride reduction: kTensorStatsBlock threads per block, at most kTensorStatsMaxBlocks
// blocks, each writing one 48-byte partial record that the host combines. The kernel asks for
// 8 resident blocks of 256 threads per SM (32 registers; CUDA 13.0 gives it exactly that, no
// spills), so 1024 blocks run in one wave on a 132-SM H200 (1056 slots; 1.2 waves on a
// 108-SM A100), cost the host 48 KiB of copy-back and 1024 record merges, and leave each
// thread of a 3e7-element tensor ~115 elements: the partials stay cheap next to the pass over
// memory.
inline constexpr int kTensorStatsBlock = 256;
inline constexpr int kTensorStatsMaxBlocks = 1024;

}  // namespace kiln::kernels
