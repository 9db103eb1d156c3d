// The compilation unit of the rope family (ops apply_rope and apply_rope_with_cos_sin_cache).
// kiln_config.cuh, rendered per specialization by kernels/ops/rope/rope_generator.cpp, chooses
// the dtypes, the rotary dim, the style, the shape and which entry this unit defines.
#include "kiln/rope/rope.cuh"

// The declaration below ends the precompiled-header prefix (the leading block of
// directives), so every specialization shares one PCH of the headers above, and the
// per-specialization kiln_config.cuh stays out of it: NVRTC 13.0 does not compare in-memory
// header contents before it reuses a PCH (see server/jit/pch_key.h).
namespace kiln_rope_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_ROPE_T) || !defined(KILN_ROPE_POS) || !defined(KILN_ROPE_ROTARY_DIM) ||      \
    !defined(KILN_ROPE_VEC) || !defined(KILN_ROPE_INTERLEAVED) || !defined(KILN_ROPE_TOKENS_PER_BLOCK) || \
    !defined(KILN_ROPE_COS_SIN_CACHE)
#error "kiln_config.cuh must define every KILN_ROPE_* parameter (see rope_generator.cpp)"
#endif

using Shape = kiln::rope::RopeShape<KILN_ROPE_T, KILN_ROPE_POS, KILN_ROPE_ROTARY_DIM, KILN_ROPE_VEC,
                                    KILN_ROPE_INTERLEAVED != 0, KILN_ROPE_TOKENS_PER_BLOCK>;
using Pos = Shape::Pos;

// Launch: grid.x = ceil(tokens / tokens_per_block), grid.y = head groups (1..q_heads +
// k_heads, at most 65535), block.x = block, no dynamic shared memory. Strides in elements.
#if KILN_ROPE_COS_SIN_CACHE
extern "C" __global__ void __launch_bounds__(Shape::kBlock)
    kiln_apply_rope_with_cos_sin_cache(void* q, void* k, const void* positions, long long tokens,
                                       long long q_token_stride, long long q_head_stride, int q_heads,
                                       long long k_token_stride, long long k_head_stride, int k_heads,
                                       const float* cos_sin_cache, long long max_position,
                                       long long cache_stride) {
  const kiln::rope::RopeHeads heads{q, k, q_token_stride, q_head_stride, k_token_stride, k_head_stride,
                                    q_heads, k_heads};
  kiln::rope::ApplyRopeWithCosSinCache<Shape>(heads, static_cast<const Pos*>(positions), tokens,
                                              cos_sin_cache, max_position, cache_stride);
}
#else
// factor <= 0: no Llama-3.1 frequency scaling.
extern "C" __global__ void __launch_bounds__(Shape::kBlock)
    kiln_apply_rope(void* q, void* k, const void* positions, long long tokens,
                    long long q_token_stride, long long q_head_stride, int q_heads,
                    long long k_token_stride, long long k_head_stride, int k_heads, double log2_theta,
                    double factor, double low_freq_factor, double high_freq_factor,
                    double original_max_position) {
  const kiln::rope::RopeHeads heads{q, k, q_token_stride, q_head_stride, k_token_stride, k_head_stride,
                                    q_heads, k_heads};
  kiln::rope::ApplyRope<Shape>(heads, static_cast<const Pos*>(positions), tokens, log2_theta, factor,
                               low_freq_factor, high_freq_factor, original_max_position);
}
#endif
