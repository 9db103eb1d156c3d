// The compilation unit of op "all_reduce": entries kiln_all_reduce_one_shot and
// kiln_all_reduce_two_shot. kiln_config.cuh, rendered per specialization by
// kernels/ops/comm/all_reduce_generator.cpp, chooses the dtype, world size, vec and block.
// Contract and launch rule: kiln/comm/all_reduce.cuh, docs/kernels-comm.md.
#include "kiln/comm/all_reduce.cuh"

// The declaration below ends the precompiled-header prefix, so every specialization shares
// one PCH of the headers above and the per-specialization config stays out of it (NVRTC
// 13.0 does not compare in-memory header contents before it reuses a PCH; see
// server/jit/pch_key.h).
namespace kiln_all_reduce_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_ALL_REDUCE_T) || !defined(KILN_ALL_REDUCE_WORLD) || !defined(KILN_ALL_REDUCE_VEC) || \
    !defined(KILN_ALL_REDUCE_BLOCK)
#error "kiln_config.cuh must define every KILN_ALL_REDUCE_* parameter (see all_reduce_generator.cpp)"
#endif

using Shape =
    kiln::comm::AllReduceShape<KILN_ALL_REDUCE_T, KILN_ALL_REDUCE_WORLD, KILN_ALL_REDUCE_VEC, KILN_ALL_REDUCE_BLOCK>;
using T = Shape::T;

// Launch (kiln/comm/comm_contract.h): block.x = block, grid.x = AllReduceGrid(...), no dynamic
// shared memory. At most 128 registers per thread, so one block fits any sm_80+ SM.
extern "C" __global__ void __launch_bounds__(Shape::kBlock, 1)
    kiln_all_reduce_one_shot(const kiln::comm::AllReduceParams p) {
  kiln::comm::AllReduceOneShot<Shape>(p.peers, p.epochs, p.control, static_cast<const T*>(p.input),
                                      static_cast<T*>(p.output), p.n, p.rank, p.copy_input != 0, p.timeout_ns);
}

extern "C" __global__ void __launch_bounds__(Shape::kBlock, 1)
    kiln_all_reduce_two_shot(const kiln::comm::AllReduceParams p) {
  kiln::comm::AllReduceTwoShot<Shape>(p.peers, p.epochs, p.control, static_cast<const T*>(p.input),
                                      static_cast<T*>(p.output), p.n, p.rank, p.copy_input != 0, p.timeout_ns);
}
