// What the fused MoE layers' routines share (fused_moe.cpp, fused_moe_fp8.cpp; defined in
// fused_moe.cpp): the routing every case draws, the axes' checks, and the launch grid of their
// GPU references (a warp per output element, 8 a block).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "bench/op/routine.h"
#include "kiln/kernel.h"

namespace kiln::bench {

// top_k distinct experts per token, uniformly drawn, from a seed drawn from the shape: Describe
// knows which experts a case chooses (its bytes are theirs).
std::vector<int> FusedMoeRoutedIds(int64_t tokens, int64_t top_k, int64_t experts);

// The ids tensor of a case filled with FusedMoeRoutedIds of its shape's tokens, top_k, experts.
void FillFusedMoeIds(const ShapeAxes& shape, HostTensor* ids);

// INVALID_ARGUMENT "<routine>: ..." unless 1 <= experts <= 256, 1 <= top_k <= min(experts, 16),
// tokens >= 1, hidden and intermediate positive multiples of `multiple`, gate_up = 2 intermediate,
// and the workspace at least `need` bytes.
Status CheckFusedMoeAxes(std::string_view routine, const ShapeAxes& shape, int64_t multiple, int64_t need);

// A GPU reference's launch over `rows` rows of `columns` output elements: 256 threads, a warp per
// element, grid (ceil(columns / 8), rows).
LaunchConfig FusedMoeReferenceGrid(long long columns, long long rows, CUstream stream);

}  // namespace kiln::bench
