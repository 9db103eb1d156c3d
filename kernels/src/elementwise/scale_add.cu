// The compilation unit of scale_add (kiln/elementwise/elementwise_contract.h): out = alpha * x +
// y over n contiguous elements, in fp32, rounded once. kiln_config.cuh, rendered per
// specialization by kernels/ops/elementwise/scale_add_generator.cpp, sets the dtype, the block
// and the elements per thread.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kiln/elementwise/elementwise_contract.h"

#include "kiln_config.cuh"

#if !defined(KILN_SCALE_ADD_T) || !defined(KILN_SCALE_ADD_BLOCK) || !defined(KILN_SCALE_ADD_ITEMS)
#error "kiln_config.cuh must define KILN_SCALE_ADD_T, _BLOCK and _ITEMS (see scale_add_generator.cpp)"
#endif

using T = KILN_SCALE_ADD_T;

// Block b covers items_per_block = BLOCK * ITEMS consecutive elements, thread t every BLOCK-th
// of them, so a warp's loads are coalesced.
extern "C" __global__ void __launch_bounds__(KILN_SCALE_ADD_BLOCK)
    kiln_scale_add(const kiln::elementwise::ScaleAddParams p) {
  const long long start = static_cast<long long>(blockIdx.x) * (KILN_SCALE_ADD_BLOCK * KILN_SCALE_ADD_ITEMS);
  T* out = static_cast<T*>(p.out);
  const T* x = static_cast<const T*>(p.x);
  const T* y = static_cast<const T*>(p.y);
#pragma unroll
  for (int i = 0; i < KILN_SCALE_ADD_ITEMS; ++i) {
    const long long e = start + i * KILN_SCALE_ADD_BLOCK + threadIdx.x;
    if (e < p.n) out[e] = static_cast<T>(p.alpha * static_cast<float>(x[e]) + static_cast<float>(y[e]));
  }
}
