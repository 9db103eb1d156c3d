// The compilation unit of fused_moe's own kernels, the decode path's two GEMVs and their folded and
// one-grid forms (the grouped path launches other ops' kernels). kiln_config.cuh, rendered per specialization by
// kernels/ops/moe/fused_moe_generator.cpp, chooses the element type; every size is a launch
// argument. Contract: kiln/moe/moe_contract.h, kiln/moe/fused_moe_gemv.cuh, docs/kernels-moe.md.
#include "kiln/moe/fused_moe_gemv.cuh"
#include "kiln/moe/fused_moe_one_grid.cuh"

// The declaration below ends the precompiled-header prefix, so both specializations share one
// PCH of the headers above (see kernels/src/moe/moe_route.cu and server/jit/pch_key.h).
namespace kiln_fused_moe_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_FUSED_MOE_T)
#error "kiln_config.cuh must define KILN_FUSED_MOE_T (see fused_moe_generator.cpp)"
#endif

// Launch (kiln/moe/moe_contract.h): block.x = kGemvBlock (kGemvBlocksPerSm of them fit an SM's
// registers: while one block finds its expert, the others stream); grid.x = ceil(I / kGemvGateUpColumns)
// (gate_up) or ceil(H / kGemvDownColumns) (down); grid.y = FusedMoeGemvExpertBlocks(E, slots);
// no dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kiln::moe::kGemvBlock, kiln::moe::kGemvBlocksPerSm)
    kiln_fused_moe_gate_up(const kiln::moe::FusedMoeGemvParams p) {
  kiln::moe::ExpertGemv<KILN_FUSED_MOE_T, true>(p);
}

extern "C" __global__ void __launch_bounds__(kiln::moe::kGemvBlock, kiln::moe::kGemvBlocksPerSm)
    kiln_fused_moe_down(const kiln::moe::FusedMoeGemvParams p) {
  kiln::moe::ExpertGemv<KILN_FUSED_MOE_T, false>(p);
}

// The folded path (a second parameter, FusedMoeFoldParams): the same gate-up GEMV, which also zeroes
// the down GEMV's arrival counters and writes no slot_to_row; the down GEMV with column_groups
// groups a block (grid.x = ceil(ceil(H / kGemvDownColumns) / column_groups)) whose last block
// at each column block combines into out: two launches, no moe_unpermute.
extern "C" __global__ void __launch_bounds__(kiln::moe::kGemvBlock, kiln::moe::kGemvBlocksPerSm)
    kiln_fused_moe_gate_up_folded(const kiln::moe::FusedMoeGemvParams p, const kiln::moe::FusedMoeFoldParams fold) {
  kiln::moe::ExpertGemv<KILN_FUSED_MOE_T, true, true>(p, &fold);
}

extern "C" __global__ void __launch_bounds__(kiln::moe::kGemvBlock, kiln::moe::kGemvBlocksPerSm)
    kiln_fused_moe_down_folded(const kiln::moe::FusedMoeGemvParams p, const kiln::moe::FusedMoeFoldParams fold) {
  kiln::moe::FoldedDownGemv<KILN_FUSED_MOE_T>(p, fold);
}

// The one-grid form (FusedMoeOneGridParams): a block of kGemvBlock threads prepares (grid 1), then
// one grid of (gate_up_blocks + down_blocks) x expert_blocks blocks in x does both products, each
// block what its ticket says; moe_unpermute follows as after the two GEMVs.
extern "C" __global__ void __launch_bounds__(kiln::moe::kGemvBlock)
    kiln_fused_moe_one_grid_prepare(const kiln::moe::FusedMoeGemvParams p, const kiln::moe::FusedMoeOneGridParams g) {
  kiln::moe::OneGridPrepare(p, g);
}

extern "C" __global__ void __launch_bounds__(kiln::moe::kGemvBlock, kiln::moe::kGemvBlocksPerSm)
    kiln_fused_moe_one_grid(const kiln::moe::FusedMoeGemvParams gate_up, const kiln::moe::FusedMoeGemvParams down,
                            const kiln::moe::FusedMoeOneGridParams g) {
  kiln::moe::OneGridGemvs<KILN_FUSED_MOE_T>(gate_up, down, g);
}
