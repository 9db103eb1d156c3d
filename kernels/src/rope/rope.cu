// The compilation unit of the rope family (ops apply_rope and apply_rope_with_cos_sin_cache).
// kiln_config.cuh, rendered per specialization by kernels/ops/rope/rope_generator.cpp, chooses
// the dtypes, the rotary dim, the style, the shape and which entry this unit defines.
#include "kiln/common/grid_dependency.cuh"
#include "kiln/rope/rope.cuh"

// The declaration below ends the precompiled-header prefix (the leading block of
// directives), so every specialization shares one PCH of the headers above, and the
// per-specialization kiln_config.cuh stays out of it: NVRTC 13.0 does not compare in-memory
// header contents before it reuses a PCH (see server/jit/pch_key.h).
namespace kiln_rope_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_ROPE_T) || !defined(KILN_ROPE_POS) || !defined(KILN_ROPE_ROTARY_DIM) || !defined(KILN_ROPE_VEC) || \
    !defined(KILN_ROPE_INTERLEAVED) || !defined(KILN_ROPE_TOKENS_PER_BLOCK) || !defined(KILN_ROPE_COS_SIN_CACHE)
#error "kiln_config.cuh must define every KILN_ROPE_* parameter (see rope_generator.cpp)"
#endif

using Shape = kiln::rope::RopeShape<KILN_ROPE_T, KILN_ROPE_POS, KILN_ROPE_ROTARY_DIM, KILN_ROPE_VEC,
                                    KILN_ROPE_INTERLEAVED != 0, KILN_ROPE_TOKENS_PER_BLOCK>;
using Pos = Shape::Pos;

// Launch (kiln/rope/rope_contract.h): grid.x = ceil(tokens / tokens_per_block), grid.y = head
// groups (1..q_heads + k_heads, at most 65535), block.x = block, no dynamic shared memory.
#if KILN_ROPE_COS_SIN_CACHE
extern "C" __global__ void __launch_bounds__(Shape::kBlock)
    kiln_apply_rope_with_cos_sin_cache(const kiln::rope::ApplyRopeWithCosSinCacheParams p) {
  kiln::GridDependencyBegin();
  const kiln::rope::RopeHeads heads{
      p.q, p.k, p.q_token_stride, p.q_head_stride, p.k_token_stride, p.k_head_stride, p.q_heads, p.k_heads};
  kiln::rope::ApplyRopeWithCosSinCache<Shape>(heads, static_cast<const Pos*>(p.positions), p.tokens, p.cos_sin_cache,
                                              p.max_position, p.cache_stride);
}
#else
// __grid_constant__ (the parameter is read in place) only here: with it ptxas (CUDA 13.0)
// allocates 64 registers to this entry, as for the earlier scalar parameters, without it 72
// (7 instead of 8 blocks of 128 per SM); the cache entry gets 76 without and spills with it.
extern "C" __global__ void __launch_bounds__(Shape::kBlock)
    kiln_apply_rope(const __grid_constant__ kiln::rope::ApplyRopeParams p) {
  kiln::GridDependencyBegin();
  const kiln::rope::RopeHeads heads{
      p.q, p.k, p.q_token_stride, p.q_head_stride, p.k_token_stride, p.k_head_stride, p.q_heads, p.k_heads};
  kiln::rope::ApplyRope<Shape>(heads, static_cast<const Pos*>(p.positions), p.tokens, p.log2_theta, p.factor,
                               p.low_freq_factor, p.high_freq_factor, p.original_max_position);
}
#endif
