// The compilation unit of the activation family (ops silu_and_mul, gelu_and_mul and
// gelu_tanh_and_mul). kiln_config.cuh, rendered per specialization by
// kernels/ops/activation/act_and_mul_generator.cpp, chooses the activation, the dtype and the
// shape, and so which entry this unit defines.
#include "kiln/activation/act_and_mul.cuh"

// The declaration below ends the precompiled-header prefix (the leading block of
// directives), so every specialization shares one PCH of the headers above, and the
// per-specialization kiln_config.cuh stays out of it: NVRTC 13.0 does not compare in-memory
// header contents before it reuses a PCH (see server/jit/pch_key.h).
namespace kiln_act_and_mul_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_ACT_KIND) || !defined(KILN_ACT_T) || !defined(KILN_ACT_VEC) || \
    !defined(KILN_ACT_BLOCK) || !defined(KILN_ACT_ITEMS)
#error "kiln_config.cuh must define every KILN_ACT_* parameter (see act_and_mul_generator.cpp)"
#endif

using Shape = kiln::activation::ActAndMulShape<KILN_ACT_T, KILN_ACT_VEC, KILN_ACT_BLOCK, KILN_ACT_ITEMS>;
using T = Shape::T;

// Launch (every entry): grid.x = rows * ceil(d / cols_per_block), block.x = block (launch
// hints), no dynamic shared memory.
#if KILN_ACT_KIND == 0
extern "C" __global__ void __launch_bounds__(Shape::kBlock)
    kiln_silu_and_mul(void* out, const void* input, long long rows, int d, long long out_row_stride,
                      long long in_row_stride) {
  kiln::activation::ActAndMul<Shape, kiln::activation::Silu>(
      static_cast<T*>(out), static_cast<const T*>(input), rows, d, out_row_stride, in_row_stride);
}
#elif KILN_ACT_KIND == 1
extern "C" __global__ void __launch_bounds__(Shape::kBlock)
    kiln_gelu_and_mul(void* out, const void* input, long long rows, int d, long long out_row_stride,
                      long long in_row_stride) {
  kiln::activation::ActAndMul<Shape, kiln::activation::Gelu>(
      static_cast<T*>(out), static_cast<const T*>(input), rows, d, out_row_stride, in_row_stride);
}
#elif KILN_ACT_KIND == 2
extern "C" __global__ void __launch_bounds__(Shape::kBlock)
    kiln_gelu_tanh_and_mul(void* out, const void* input, long long rows, int d,
                           long long out_row_stride, long long in_row_stride) {
  kiln::activation::ActAndMul<Shape, kiln::activation::GeluTanh>(
      static_cast<T*>(out), static_cast<const T*>(input), rows, d, out_row_stride, in_row_stride);
}
#else
#error "KILN_ACT_KIND must be 0 (silu), 1 (gelu) or 2 (gelu_tanh)"
#endif
