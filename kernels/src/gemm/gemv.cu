// The compilation unit of gemm's small-M kernel (op gemm, param kernel = gemv, entry
// kiln_gemm_gemv). kiln_config.cuh, rendered per specialization by
// kernels/ops/gemm/gemm_generator.cpp, chooses the input and output types; M, N and K
// are launch arguments. Contract: kiln/gemm/gemm_contract.h (GemmGemvParams), kiln/gemm/gemv.cuh.
#include "kiln/gemm/gemv.cuh"

// Ends the precompiled-header prefix: every specialization shares one PCH of the headers above
// (see kernels/src/gemm/gemm.cu and server/jit/pch_key.h).
namespace kiln_gemm_gemv_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_GEMM_TIN) || !defined(KILN_GEMM_TOUT)
#error "kiln_config.cuh must define KILN_GEMM_TIN and KILN_GEMM_TOUT (see gemm_generator.cpp)"
#endif

// Launch (kiln/gemm/gemm_contract.h): block.x = kGemvThreads, grid.x = ceil(N /
// kGemvColumnsPerBlock), no dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kiln::gemm::kGemvThreads, kiln::gemm::kGemvBlocksPerSm)
    kiln_gemm_gemv(const kiln::gemm::GemmGemvParams p) {
  kiln::gemm::Gemv<KILN_GEMM_TIN, KILN_GEMM_TOUT>(p);
}

extern "C" __global__ void __launch_bounds__(kiln::gemm::kGemvThreads, kiln::gemm::kGemvBlocksPerSm)
    kiln_gemm_gemv_mma(const kiln::gemm::GemmGemvParams p) {
  kiln::gemm::GemvMma<KILN_GEMM_TIN, KILN_GEMM_TOUT>(p);
}

extern "C" __global__ void __launch_bounds__(kiln::gemm::kGemvThreads, kiln::gemm::kGemvBlocksPerSm)
    kiln_gemm_gemv_mma_wide(const kiln::gemm::GemmGemvParams p) {
  kiln::gemm::GemvMmaWide<KILN_GEMM_TIN, KILN_GEMM_TOUT>(p);
}
