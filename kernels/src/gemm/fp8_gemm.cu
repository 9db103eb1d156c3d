// The compilation unit of fp8_gemm (entry kiln_fp8_gemm; sm_90a only): the gemm kernel on e4m3
// A and B with DeepSeek-V3-style fp32 scales (A per 1 x 128 of K, B per 128 x 128 block),
// promoted into fp32 accumulators once per 128 of K (kiln/gemm/gemm_contract.h).
// kiln_config.cuh, rendered per specialization by kernels/ops/gemm/fp8_gemm_generator.cpp,
// chooses the output type and the tactic (tile, stages, raster group, split-K).
#include "kiln/gemm/gemm_contract.h"
#include "kiln/gemm/gemm_sm90.cuh"

// Ends the precompiled-header prefix (the same headers as gemm.cu: one PCH serves all three).
namespace kiln_gemm_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_GEMM_TOUT) || !defined(KILN_GEMM_TILE_M) || !defined(KILN_GEMM_TILE_N) || \
    !defined(KILN_GEMM_STAGES) || !defined(KILN_GEMM_GROUP_M) || !defined(KILN_GEMM_SPLIT_K)
#error "kiln_config.cuh must define every KILN_GEMM_* parameter (see fp8_gemm_generator.cpp)"
#endif

#include "kiln/gemm/split_k_cluster.cuh"  // KILN_GEMM_CLUSTER, and KILN_GEMM_MULTICAST 1 unless the config says

using Shape =
    kiln::gemm::GemmShape<__nv_fp8_e4m3, KILN_GEMM_TOUT, KILN_GEMM_TILE_M, KILN_GEMM_TILE_N, KILN_GEMM_STAGES,
                          KILN_GEMM_GROUP_M, KILN_GEMM_SPLIT_K, kiln::gemm::kDenseLayout, KILN_GEMM_MULTICAST>;

// Launch (kiln/gemm/gemm_contract.h): persistent, grid.x = split_k * min(tiles, clusters at
// once), block.x = GemmThreads(tile_m), dynamic shared memory GemmSmemBytes(...). The parameter
// lives in the parameter space (__grid_constant__) because TMA reads the tensor maps from there.
extern "C" __global__ void __launch_bounds__(Shape::kThreads, 1) KILN_GEMM_CLUSTER
    kiln_fp8_gemm(const __grid_constant__ kiln::gemm::GemmParams p) {
  kiln::gemm::Gemm<Shape>(p);
}
