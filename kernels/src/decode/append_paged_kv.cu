// The compilation unit of the append_paged_kv op. kiln_config.cuh, rendered per
// specialization by kernels/ops/decode/append_paged_kv_generator.cpp, chooses the dtype, the
// head dim, the vector width and the block.
#include "kiln/common/grid_dependency.cuh"
#include "kiln/decode/append_paged_kv.cuh"

// Ends the precompiled-header prefix before the per-specialization config (see batch_decode.cu).
namespace kiln_append_paged_kv_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_APPEND_T) || !defined(KILN_APPEND_HEAD_DIM) || !defined(KILN_APPEND_VEC) || \
    !defined(KILN_APPEND_BLOCK)
#error "kiln_config.cuh must define every KILN_APPEND_* parameter (see append_paged_kv_generator.cpp)"
#endif

using Shape = kiln::decode::AppendShape<KILN_APPEND_T, KILN_APPEND_HEAD_DIM, KILN_APPEND_VEC, KILN_APPEND_BLOCK>;

// Launch: grid.x = min(ceil(nnz * num_kv_heads * head_dim / vec / block), max_blocks hint),
// block.x = the "block" hint, no shared memory.
extern "C" __global__ void __launch_bounds__(Shape::kBlock)
    kiln_append_paged_kv(const __grid_constant__ kiln::decode::KilnAppendPagedKvParams params) {
  kiln::GridDependencyBegin();
  kiln::decode::AppendPagedKv<Shape>(params);
}
