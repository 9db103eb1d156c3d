// The compilation unit of grouped_gemm (entry kiln_grouped_gemm; sm_90a only): the gemm kernel
// over groups that share N and K, their rows on the device (kiln/gemm/gemm_contract.h).
// kiln_config.cuh, rendered per specialization by kernels/ops/gemm/grouped_gemm_generator.cpp,
// chooses the types, the layout (contiguous or masked), the tactic (tile, stages, raster
// group), the epilogue (plain or silu_and_mul) and whether A's rows are gathered (a_gather).
#include "kiln/gemm/gemm_contract.h"
#include "kiln/gemm/gemm_sm90.cuh"

// Ends the precompiled-header prefix (the same headers as gemm.cu: one PCH serves both).
namespace kiln_gemm_unit {}

#include "kiln_config.cuh"

// The epilogue (kiln::gemm::GemmEpilogue): plain unless the spec asks for silu_and_mul.
#ifndef KILN_GEMM_EPILOGUE
#define KILN_GEMM_EPILOGUE kiln::gemm::kPlainEpilogue
#endif
// A's rows gathered through GemmParams::a_rows (param a_gather 1, contiguous): off unless defined.
#ifndef KILN_GEMM_A_GATHER
#define KILN_GEMM_A_GATHER false
#endif

#if !defined(KILN_GEMM_TIN) || !defined(KILN_GEMM_TOUT) || !defined(KILN_GEMM_TILE_M) || !defined(KILN_GEMM_TILE_N) || \
    !defined(KILN_GEMM_STAGES) || !defined(KILN_GEMM_GROUP_M) || !defined(KILN_GEMM_LAYOUT)
#error "kiln_config.cuh must define every KILN_GEMM_* parameter (see grouped_gemm_generator.cpp)"
#endif

using Shape = kiln::gemm::GemmShape<KILN_GEMM_TIN, KILN_GEMM_TOUT, KILN_GEMM_TILE_M, KILN_GEMM_TILE_N, KILN_GEMM_STAGES,
                                    KILN_GEMM_GROUP_M, 1, KILN_GEMM_LAYOUT, 1, KILN_GEMM_EPILOGUE, KILN_GEMM_A_GATHER>;
static_assert(Shape::kGrouped, "KILN_GEMM_LAYOUT is kiln::gemm::kContiguousLayout or kMaskedLayout");

// Launch (kiln/gemm/gemm_contract.h): persistent, grid.x = the SM count (the tiles are known
// only on the device), block.x = GemmThreads(tile_m), dynamic shared memory
// GemmSmemBytes(..., grouped). The parameter lives in the parameter space (__grid_constant__)
// because TMA reads the tensor maps from there.
extern "C" __global__ void __launch_bounds__(Shape::kThreads, 1)
    kiln_grouped_gemm(const __grid_constant__ kiln::gemm::GemmParams p) {
  kiln::gemm::Gemm<Shape>(p);
}
