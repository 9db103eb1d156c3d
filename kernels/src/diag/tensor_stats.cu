// The compilation unit of the diagnostics op tensor_stats. kiln_config.cuh, rendered per
// specialization by kernels/ops/diag/tensor_stats_generator.cpp, chooses the element type and
// the block size.
#include "kiln/diag/tensor_stats.cuh"

// The declaration below ends the precompiled-header prefix (the leading block of
// directives), so every specialization shares one PCH of the headers above, and the
// per-specialization kiln_config.cuh stays out of it: NVRTC 13.0 does not compare in-memory
// header contents before it reuses a PCH (see server/jit/pch_key.h).
namespace kiln_tensor_stats_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_STATS_T) || !defined(KILN_STATS_BLOCK)
#error "kiln_config.cuh must define every KILN_STATS_* parameter (see tensor_stats_generator.cpp)"
#endif

using Shape = kiln::diag::TensorStatsShape<KILN_STATS_T, KILN_STATS_BLOCK>;

// Launch (kiln/diag/diag_contract.h): grid.x = min(ceil(numel / block), max_blocks), block.x =
// block (launch hints), no dynamic shared memory; `partials` holds grid.x records. numel >= 1.
extern "C" __global__ void __launch_bounds__(Shape::kBlock, Shape::kMinBlocksPerSm)
    kiln_tensor_stats(const kiln::diag::TensorStatsParams p) {
  kiln::diag::TensorStats<Shape>(p.partials, p.data, p.numel, p.layout);
}
