// The compilation unit of fp8_gemm's small-M kernels (op fp8_gemm_gemv, entries kiln_fp8_gemm_gemv
// and kiln_fp8_gemm_gemv_wide).
// kiln_config.cuh, rendered per specialization by kernels/ops/gemm/fp8_gemm_gemv_generator.cpp,
// chooses the output type; M, N, K and the k parts are launch arguments. Contract:
// kiln/gemm/gemm_contract.h (Fp8GemmGemvParams), kiln/gemm/fp8_gemv.cuh.
#include "kiln/gemm/fp8_gemv.cuh"

// Ends the precompiled-header prefix: every specialization shares one PCH of the headers above
// (see kernels/src/gemm/gemm.cu and server/jit/pch_key.h).
namespace kiln_fp8_gemm_gemv_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_GEMM_TOUT)
#error "kiln_config.cuh must define KILN_GEMM_TOUT (see fp8_gemm_gemv_generator.cpp)"
#endif

// Launch (kiln/gemm/gemm_contract.h): block.x = kGemvThreads, grid.x = ceil(N /
// Fp8GemvBlockRows(k_parts)), no dynamic shared memory.
extern "C" __global__ void __launch_bounds__(kiln::gemm::kGemvThreads, kiln::gemm::kFp8GemvBlocksPerSm)
    kiln_fp8_gemm_gemv(const kiln::gemm::Fp8GemmGemvParams p) {
  kiln::gemm::Fp8GemmGemv<KILN_GEMM_TOUT>(p);
}

// M 9-16 in one pass: the same launch.
extern "C" __global__ void __launch_bounds__(kiln::gemm::kGemvThreads, kiln::gemm::kFp8GemvBlocksPerSm)
    kiln_fp8_gemm_gemv_wide(const kiln::gemm::Fp8GemmGemvParams p) {
  kiln::gemm::Fp8GemmGemvWide<KILN_GEMM_TOUT>(p);
}
