// The compilation unit of op "all_reduce_add_rmsnorm": entry kiln_all_reduce_add_rmsnorm.
// kiln_config.cuh, rendered per specialization by kernels/ops/comm/all_reduce_generator.cpp,
// chooses the dtype, world size, hidden, vec and block.
// Contract and launch rule: kiln/comm/all_reduce_add_rmsnorm.cuh, docs/kernels-comm.md.
#include "kiln/comm/all_reduce_add_rmsnorm.cuh"

// Ends the precompiled-header prefix before the per-specialization config (see all_reduce.cu).
namespace kiln_all_reduce_add_rmsnorm_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_AR_RMSNORM_T) || !defined(KILN_AR_RMSNORM_WORLD) || !defined(KILN_AR_RMSNORM_HIDDEN) || \
    !defined(KILN_AR_RMSNORM_VEC) || !defined(KILN_AR_RMSNORM_BLOCK)
#error "kiln_config.cuh must define every KILN_AR_RMSNORM_* parameter (see all_reduce_generator.cpp)"
#endif

using Shape = kiln::comm::AllReduceAddRmsNormShape<KILN_AR_RMSNORM_T, KILN_AR_RMSNORM_WORLD, KILN_AR_RMSNORM_HIDDEN,
                                                   KILN_AR_RMSNORM_VEC, KILN_AR_RMSNORM_BLOCK>;
using T = Shape::T;

// Launch (kiln/comm/comm_contract.h): block.x = block, grid.x = AllReduceAddRmsNormGrid(rows,
// max_blocks), no dynamic shared memory. 512 / block blocks per SM cap the registers at 128
// per thread, so an SM holds 512 threads whatever the block.
extern "C" __global__ void __launch_bounds__(Shape::kBlock, 512 / Shape::kBlock)
    kiln_all_reduce_add_rmsnorm(const kiln::comm::AllReduceAddRmsNormParams p) {
  kiln::comm::AllReduceAddRmsNorm<Shape>(p.peers, p.epochs, p.control, static_cast<const T*>(p.input),
                                         static_cast<T*>(p.residual), static_cast<const T*>(p.weight),
                                         static_cast<T*>(p.output), p.rows, p.eps, p.rank, p.copy_input != 0,
                                         p.timeout_ns);
}
