// The compilation unit of the gemm family (op gemm, entry kiln_gemm; sm_90a only).
// kiln_config.cuh, rendered per specialization by kernels/ops/gemm/gemm_generator.cpp, chooses
// the input and output types and the tactic (tile, stages, raster group, split-K, multicast:
// KILN_GEMM_MULTICAST is defined only when above 1, so the configs without it stay as they were).
#include "kiln/gemm/gemm_contract.h"
#include "kiln/gemm/gemm_sm90.cuh"

// Ends the precompiled-header prefix: every specialization shares one PCH of the headers above
// (see kernels/src/activation/act_and_mul.cu and server/jit/pch_key.h).
namespace kiln_gemm_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_GEMM_TIN) || !defined(KILN_GEMM_TOUT) || !defined(KILN_GEMM_TILE_M) || !defined(KILN_GEMM_TILE_N) || \
    !defined(KILN_GEMM_STAGES) || !defined(KILN_GEMM_GROUP_M) || !defined(KILN_GEMM_SPLIT_K)
#error "kiln_config.cuh must define every KILN_GEMM_* parameter (see gemm_generator.cpp)"
#endif

#include "kiln/gemm/split_k_cluster.cuh"  // KILN_GEMM_CLUSTER, and KILN_GEMM_MULTICAST 1 unless the config says

using Shape =
    kiln::gemm::GemmShape<KILN_GEMM_TIN, KILN_GEMM_TOUT, KILN_GEMM_TILE_M, KILN_GEMM_TILE_N, KILN_GEMM_STAGES,
                          KILN_GEMM_GROUP_M, KILN_GEMM_SPLIT_K, kiln::gemm::kDenseLayout, KILN_GEMM_MULTICAST>;

// Launch (kiln/gemm/gemm_contract.h): persistent, grid.x = cluster blocks * min(units, clusters at once), block.x =
// GemmThreads(tile_m), dynamic shared memory GemmSmemBytes(...). The parameter lives in the
// parameter space (__grid_constant__) because TMA reads the tensor maps from there.
extern "C" __global__ void __launch_bounds__(Shape::kThreads, 1) KILN_GEMM_CLUSTER
    kiln_gemm(const __grid_constant__ kiln::gemm::GemmParams p) {
  kiln::gemm::Gemm<Shape>(p);
}
