// The compilation unit of moe_permute: the permutation (one block, or for many slots three
// multi-block launches) and the optional gather (one warp per permuted row). kiln_config.cuh, rendered per
// specialization by kernels/ops/moe/moe_permute_generator.cpp, sizes the shared tables (max_experts). Contract:
// kiln/moe/moe_contract.h, kiln/moe/moe_permute.cuh, docs/kernels-moe.md.
#include "kiln/moe/moe_permute.cuh"

// The declaration below ends the precompiled-header prefix, so every specialization shares one
// PCH of the headers above (see kernels/src/moe/moe_route.cu and server/jit/pch_key.h).
namespace kiln_moe_permute_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_MOE_PERMUTE_MAX_EXPERTS)
#error "kiln_config.cuh must define KILN_MOE_PERMUTE_MAX_EXPERTS (see moe_permute_generator.cpp)"
#endif

// Launch: one block of kPermuteBlock threads (few slots: MoePermuteMultiBlock false).
extern "C" __global__ void __launch_bounds__(kiln::moe::kPermuteBlock)
    kiln_moe_permute(const kiln::moe::MoePermuteParams p) {
  kiln::moe::PermuteBlock<KILN_MOE_PERMUTE_MAX_EXPERTS>(p);
}

// The multi-block permutation, in stream order (MoePermuteMultiBlock): grid.x =
// MoePermuteChunks(T * top_k) blocks of kPermuteBlock threads for count and rank, then
// ceil(rows / kInvertBlock) blocks of kInvertBlock threads for invert.
extern "C" __global__ void __launch_bounds__(kiln::moe::kPermuteBlock)
    kiln_moe_permute_count(const kiln::moe::MoePermuteParams p) {
  kiln::moe::PermuteCountChunk<KILN_MOE_PERMUTE_MAX_EXPERTS>(p);
}

extern "C" __global__ void __launch_bounds__(kiln::moe::kPermuteBlock)
    kiln_moe_permute_rank(const kiln::moe::MoePermuteParams p) {
  kiln::moe::PermuteRankChunk<KILN_MOE_PERMUTE_MAX_EXPERTS>(p);
}

extern "C" __global__ void __launch_bounds__(kiln::moe::kInvertBlock)
    kiln_moe_permute_invert(const kiln::moe::MoePermuteParams p) {
  kiln::moe::PermuteInvert<KILN_MOE_PERMUTE_MAX_EXPERTS>(p);
}

// Launch: kGatherBlock threads, one warp per row, grid.x = ceil(rows / kGatherWarps).
extern "C" __global__ void __launch_bounds__(kiln::moe::kGatherBlock)
    kiln_moe_permute_gather(const kiln::moe::MoePermuteGatherParams p) {
  const long long row = static_cast<long long>(blockIdx.x) * kiln::moe::kGatherWarps +
                        static_cast<long long>(threadIdx.x / 32);
  kiln::moe::GatherRow(p, row, static_cast<int>(threadIdx.x % 32));
}
