// The compilation unit of moe_unpermute, the combine: one thread per copy unit of a token's row.
// kiln_config.cuh, rendered per specialization by kernels/ops/moe/moe_unpermute_generator.cpp,
// chooses the element type (bf16 or fp16); the unit size is a launch argument. Contract:
// kiln/moe/moe_contract.h, kiln/moe/moe_unpermute.cuh, docs/kernels-moe.md.
#include "kiln/moe/moe_unpermute.cuh"

// The declaration below ends the precompiled-header prefix, so both specializations share one
// PCH of the headers above (see kernels/src/moe/moe_route.cu and server/jit/pch_key.h).
namespace kiln_moe_unpermute_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_MOE_UNPERMUTE_T)
#error "kiln_config.cuh must define KILN_MOE_UNPERMUTE_T (see moe_unpermute_generator.cpp)"
#endif

// Launch (kiln/moe/moe_contract.h): block.x = MoeUnpermuteThreads(units) <= kUnpermuteBlock,
// grid.x = tokens, grid.y = MoeUnpermuteBlocksPerRow(units); no dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kiln::moe::kUnpermuteBlock)
    kiln_moe_unpermute(const kiln::moe::MoeUnpermuteParams p) {
  kiln::moe::UnpermuteRow<KILN_MOE_UNPERMUTE_T>(p);
}
