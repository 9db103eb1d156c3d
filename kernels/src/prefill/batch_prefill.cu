// The compilation unit of the batch_prefill_ragged and batch_prefill_paged ops: the attention
// kernel and its merge step. tile_rows 128 compiles the Hopper kernel (batch_prefill_sm90.cuh;
// head_dim 64 and 128), 64 the mma.sync kernel (batch_prefill.cuh): the contract's
// UsesSm90Kernel, which also sizes the launch. kiln_config.cuh, rendered per specialization by
// the prefill generator, chooses the dtype, head dim, group, causal mask, soft cap, row tile and
// the KV layout (ragged, or paged with its page size).
#include "kiln/prefill/batch_prefill.cuh"
#include "kiln/prefill/batch_prefill_sm90.cuh"
#include "kiln/prefill/prefill_merge.cuh"

// The declaration below ends the precompiled-header prefix, so every specialization shares
// one PCH of the headers above and the per-specialization config stays out of it (NVRTC 13.0
// does not compare in-memory header contents before it reuses a PCH: server/jit/pch_key.h).
namespace kiln_batch_prefill_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_PREFILL_T) || !defined(KILN_PREFILL_HEAD_DIM) || !defined(KILN_PREFILL_GROUP) ||      \
    !defined(KILN_PREFILL_CAUSAL) || !defined(KILN_PREFILL_SOFT_CAP) || !defined(KILN_PREFILL_PAGED) || \
    !defined(KILN_PREFILL_PAGE_SIZE) || !defined(KILN_PREFILL_TILE_ROWS)
#error "kiln_config.cuh must define every KILN_PREFILL_* parameter (see the prefill generator)"
#endif

static_assert(kiln::prefill::ValidTileRows(KILN_PREFILL_HEAD_DIM, KILN_PREFILL_TILE_ROWS),
              "the generator checks tile_rows against head_dim");

#if KILN_PREFILL_TILE_ROWS == 128
static_assert(kiln::prefill::UsesSm90Kernel(KILN_PREFILL_TILE_ROWS), "the contract picks the kernel by tile_rows");
using Shape =
    kiln::prefill_sm90::Sm90Shape<KILN_PREFILL_T, KILN_PREFILL_HEAD_DIM, KILN_PREFILL_GROUP, KILN_PREFILL_CAUSAL != 0,
                                  KILN_PREFILL_SOFT_CAP != 0, KILN_PREFILL_PAGED != 0, KILN_PREFILL_PAGE_SIZE>;

// Launch: grid = (schedule.num_items, num_kv_heads), block.x = PrefillThreads(tile_rows) (384),
// PrefillSmemBytes(head_dim, tile_rows) (== Shape::kSmemBytes) of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kiln::prefill::kSm90Threads, 1)
    kiln_batch_prefill(const __grid_constant__ kiln::prefill::KilnBatchPrefillParams params) {
  kiln::prefill_sm90::BatchPrefillSm90<Shape>(params);
}
#else
static_assert(!kiln::prefill::UsesSm90Kernel(KILN_PREFILL_TILE_ROWS), "the contract picks the kernel by tile_rows");
using Shape =
    kiln::prefill::PrefillShape<KILN_PREFILL_T, KILN_PREFILL_HEAD_DIM, KILN_PREFILL_GROUP, KILN_PREFILL_CAUSAL != 0,
                                KILN_PREFILL_SOFT_CAP != 0, KILN_PREFILL_PAGED != 0, KILN_PREFILL_PAGE_SIZE>;

// Launch: grid = (schedule.num_items, num_kv_heads), block.x = PrefillThreads(tile_rows) (128),
// PrefillSmemBytes(head_dim, tile_rows) (== Shape::kSmemBytes) of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kiln::prefill::kThreads)
    kiln_batch_prefill(const __grid_constant__ kiln::prefill::KilnBatchPrefillParams params) {
  extern __shared__ __align__(128) unsigned char smem[];
  kiln::prefill::BatchPrefill<Shape>(params, smem);
}
#endif

// Launch (split schedules only, after kiln_batch_prefill on the same stream):
// grid = (batch, ceil(schedule.merge_max_q_len / kiln::prefill::kMergePositions)),
// block.x = kiln::prefill::kMergeThreads, no shared memory.
extern "C" __global__ void __launch_bounds__(kiln::prefill::kMergeThreads)
    kiln_batch_prefill_merge(const __grid_constant__ kiln::prefill::KilnBatchPrefillParams params) {
  kiln::prefill::MergePrefillStates<Shape::T, Shape::kHeadDim, Shape::kGroup, KILN_PREFILL_TILE_ROWS>(params);
}
