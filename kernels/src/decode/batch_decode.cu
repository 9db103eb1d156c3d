// The compilation unit of the batch_decode op: the attention kernel and its merge step.
// kiln_config.cuh, rendered per specialization by kernels/ops/decode/batch_decode_generator.cpp,
// chooses the dtype, head dim, group, page size, soft cap, warps and pipeline depth.
#include "kiln/common/grid_dependency.cuh"
#include "kiln/decode/batch_decode.cuh"
#include "kiln/decode/merge_states.cuh"

// The declaration below ends the precompiled-header prefix, so every specialization shares
// one PCH of the headers above and the per-specialization config stays out of it (NVRTC 13.0
// does not compare in-memory header contents before it reuses a PCH: server/jit/pch_key.h).
namespace kiln_batch_decode_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_DECODE_T) || !defined(KILN_DECODE_HEAD_DIM) || !defined(KILN_DECODE_GROUP) ||         \
    !defined(KILN_DECODE_PAGE_SIZE) || !defined(KILN_DECODE_SOFT_CAP) || !defined(KILN_DECODE_WARPS) || \
    !defined(KILN_DECODE_STAGES)
#error "kiln_config.cuh must define every KILN_DECODE_* parameter (see batch_decode_generator.cpp)"
#endif

using Shape = kiln::decode::DecodeShape<KILN_DECODE_T, KILN_DECODE_HEAD_DIM, KILN_DECODE_GROUP, KILN_DECODE_PAGE_SIZE,
                                        KILN_DECODE_SOFT_CAP != 0, KILN_DECODE_WARPS, KILN_DECODE_STAGES>;

// Launch: grid.x = schedule.num_items * num_kv_heads, block.x = Shape::kThreads (the "block"
// hint), Shape::kSmemBytes of dynamic shared memory (the "dynamic_smem" hint).
extern "C" __global__ void __launch_bounds__(Shape::kThreads)
    kiln_batch_decode(const __grid_constant__ kiln::decode::KilnBatchDecodeParams params) {
  kiln::GridDependencyBegin();
  extern __shared__ __align__(16) unsigned char smem[];
  kiln::decode::BatchDecode<Shape>(params, smem);
}

// Launch (split schedules only, after kiln_batch_decode on the same stream):
// grid = (batch, num_qo_heads) (the "merge" hint's items_per_block: 1 head a block), block.x = 128 (its
// "block"), no dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kiln::decode::kMergeThreads)
    kiln_batch_decode_merge(const __grid_constant__ kiln::decode::KilnBatchDecodeParams params) {
  kiln::GridDependencyBegin();
  kiln::decode::MergeStates<Shape::T, Shape::kHeadDim>(params);
}
