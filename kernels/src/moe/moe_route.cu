// The compilation unit of moe_route. kiln_config.cuh, rendered per specialization by
// kernels/ops/moe/moe_route_generator.cpp, chooses logits' type, the scoring and the values per
// lane. Contract: kiln/moe/moe_contract.h, kiln/moe/moe_route.cuh, docs/kernels-moe.md.
#include "kiln/moe/moe_route.cuh"

// The declaration below ends the precompiled-header prefix (the leading block of
// directives), so every specialization shares one PCH of the headers above, and the
// per-specialization kiln_config.cuh stays out of it: NVRTC 13.0 does not compare in-memory
// header contents before it reuses a PCH (see server/jit/pch_key.h).
namespace kiln_moe_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_MOE_T) || !defined(KILN_MOE_SIGMOID) || !defined(KILN_MOE_SLOTS) || !defined(KILN_MOE_WARPS)
#error "kiln_config.cuh must define every KILN_MOE_* parameter (see moe_route_generator.cpp)"
#endif

// Launch (kiln/moe/moe_contract.h): block.x = 32 * KILN_MOE_WARPS, one warp per token,
// grid.x = ceil(tokens / KILN_MOE_WARPS); no dynamic shared memory.
extern "C" __global__ void __launch_bounds__(32 * KILN_MOE_WARPS) kiln_moe_route(const kiln::moe::MoeRouteParams p) {
  __shared__ double group_keys[KILN_MOE_WARPS][32 * KILN_MOE_SLOTS];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const long long t = static_cast<long long>(blockIdx.x) * KILN_MOE_WARPS + warp;
  if (t >= p.tokens) return;  // the whole warp: its shuffles stay among its own lanes
  kiln::moe::RouteToken<KILN_MOE_T, KILN_MOE_SIGMOID != 0, KILN_MOE_SLOTS>(p, t, lane, group_keys[warp]);
}
