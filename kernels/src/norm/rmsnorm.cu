// The compilation unit of the rmsnorm family (ops rmsnorm and fused_add_rmsnorm).
// kiln_config.cuh, rendered per specialization by kernels/ops/norm/rmsnorm_generator.cpp,
// chooses the dtype, the shape and which entry this unit defines.
#include "kiln/common/grid_dependency.cuh"
#include "kiln/norm/norm_contract.h"
#include "kiln/norm/rmsnorm.cuh"

// The declaration below ends the precompiled-header prefix (the leading block of
// directives), so every specialization shares one PCH of the headers above, and the
// per-specialization kiln_config.cuh stays out of it: NVRTC 13.0 does not compare in-memory
// header contents before it reuses a PCH (see server/jit/pch_key.h).
namespace kiln_rmsnorm_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_RMSNORM_T) || !defined(KILN_RMSNORM_HIDDEN) || !defined(KILN_RMSNORM_VEC) || \
    !defined(KILN_RMSNORM_THREADS_PER_ROW) || !defined(KILN_RMSNORM_ROWS_PER_BLOCK) ||         \
    !defined(KILN_RMSNORM_FUSED_ADD)
#error "kiln_config.cuh must define every KILN_RMSNORM_* parameter (see rmsnorm_generator.cpp)"
#endif

using Shape = kiln::norm::RmsNormShape<KILN_RMSNORM_T, KILN_RMSNORM_HIDDEN, KILN_RMSNORM_VEC,
                                       KILN_RMSNORM_THREADS_PER_ROW, KILN_RMSNORM_ROWS_PER_BLOCK>;
using T = Shape::T;

// Launch (kiln/norm/norm_contract.h): grid.x = ceil(rows / rows_per_block), block.x = block,
// no dynamic shared memory.
#if KILN_RMSNORM_FUSED_ADD
extern "C" __global__ void __launch_bounds__(Shape::kBlock)
    kiln_fused_add_rmsnorm(const kiln::norm::FusedAddRmsNormParams p) {
  kiln::GridDependencyBegin();
  kiln::norm::FusedAddRmsNorm<Shape>(static_cast<T*>(p.input), static_cast<T*>(p.residual),
                                     static_cast<const T*>(p.weight), p.rows, p.input_row_stride, p.residual_row_stride,
                                     p.eps);
}
#else
extern "C" __global__ void __launch_bounds__(Shape::kBlock) kiln_rmsnorm(const kiln::norm::RmsNormParams p) {
  kiln::GridDependencyBegin();
  kiln::norm::RmsNorm<Shape>(static_cast<T*>(p.out), static_cast<const T*>(p.input), static_cast<const T*>(p.weight),
                             p.rows, p.out_row_stride, p.input_row_stride, p.eps);
}
#endif
