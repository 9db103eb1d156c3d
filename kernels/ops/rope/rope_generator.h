// The rope family's launch-shape rule (ops "apply_rope" and "apply_rope_with_cos_sin_cache",
// whose generators register themselves in rope_generator.cpp; contract:
// kiln/rope/rope_contract.h, docs/kernels-rope.md).
#pragma once

namespace kiln::kernels {
// The block the shape aims at: enough threads per block to keep a few blocks per SM, few
// enough that a one-token launch spreads over head groups instead of idling lanes.
inline constexpr int kRopeTargetBlock = 128;

// How one specialization runs: threads_per_token threads hold a token (vec pairs each),
// tokens_per_block tokens per block of `block` = threads_per_token * tokens_per_block threads.
// grid.y (how many groups the heads are split into) is chosen per call by the client from
// the token count (client/ops/rope/rope_plan.h, RopeHeadGroups).
struct RopeLaunchShape {
  int vec = 1;
  int threads_per_token = 1;
  int tokens_per_block = 1;
  int block = 1;
};

// threads_per_token = rotary_dim / 2 / vec (1..256); tokens_per_block = max(1, 128 /
// threads_per_token). The block is not always whole warps (threads_per_token 6: 126 threads);
// the last warp then runs partly empty, which costs nothing here.
RopeLaunchShape ChooseRopeShape(int rotary_dim, int vec);

}  // namespace kiln::kernels
