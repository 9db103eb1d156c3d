// The compilation unit of fused_moe_fp8's own kernels: the activations quantized to block-scaled
// e4m3 for its two grouped_fp8_gemm steps (the gathered tokens, then silu(gate) * up), and the
// decode path's two GEMVs over each chosen expert's slots.
// kiln_config.cuh, rendered per specialization by kernels/ops/moe/fused_moe_fp8_generator.cpp,
// chooses the activations' element type; every size is a launch argument. Contract:
// kiln/moe/moe_contract.h, kiln/moe/fused_moe_fp8.cuh, docs/kernels-moe.md.
#include "kiln/moe/fused_moe_fp8.cuh"
#include "kiln/moe/fused_moe_fp8_gemv.cuh"

// The declaration below ends the precompiled-header prefix (see kernels/src/moe/moe_route.cu and
// server/jit/pch_key.h).
namespace kiln_fused_moe_fp8_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_FUSED_MOE_FP8_T)
#error "kiln_config.cuh must define KILN_FUSED_MOE_FP8_T (see fused_moe_fp8_generator.cpp)"
#endif

// Launch (kiln/moe/moe_contract.h): block.x = kFp8QuantBlock, a warp per p.passes x 256 columns
// of a row, grid.x = FusedMoeFp8QuantBlocks(rows, columns, p.passes); no dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kiln::moe::kFp8QuantBlock)
    kiln_fused_moe_fp8_quantize(const kiln::moe::FusedMoeFp8QuantParams p) {
  kiln::moe::QuantizeRow<KILN_FUSED_MOE_FP8_T, false>(p);
}

extern "C" __global__ void __launch_bounds__(kiln::moe::kFp8QuantBlock)
    kiln_fused_moe_fp8_silu_and_mul_quantize(const kiln::moe::FusedMoeFp8QuantParams p) {
  kiln::moe::QuantizeRow<KILN_FUSED_MOE_FP8_T, true>(p);
}

// Launch (kiln/moe/moe_contract.h): block.x = kGemvBlock, grid = (ceil(rows / kFp8GemvColumns),
// FusedMoeGemvExpertBlocks(E, slots)); no dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kiln::moe::kGemvBlock, kiln::moe::kFp8GemvBlocksPerSm)
    kiln_fused_moe_fp8_gate_up(const kiln::moe::FusedMoeGemvParams p, const kiln::moe::FusedMoeFp8GemvScales s) {
  kiln::moe::Fp8ExpertGemv<KILN_FUSED_MOE_FP8_T, true>(p, s);
}

extern "C" __global__ void __launch_bounds__(kiln::moe::kGemvBlock, kiln::moe::kFp8GemvBlocksPerSm)
    kiln_fused_moe_fp8_down(const kiln::moe::FusedMoeGemvParams p, const kiln::moe::FusedMoeFp8GemvScales s) {
  kiln::moe::Fp8ExpertGemv<KILN_FUSED_MOE_FP8_T, false>(p, s);
}
