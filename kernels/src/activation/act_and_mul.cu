// The compilation unit of the activation family (ops silu_and_mul, gelu_and_mul and
// gelu_tanh_and_mul). kiln_config.cuh, rendered per specialization by
// kernels/ops/activation/act_and_mul_generator.cpp, chooses the activation, the dtype and the
// shape, and so which entry this unit defines.
#include "kiln/activation/act_and_mul.cuh"
#include "kiln/activation/activation_contract.h"
#include "kiln/common/grid_dependency.cuh"

// The declaration below ends the precompiled-header prefix (the leading block of
// directives), so every specialization shares one PCH of the headers above, and the
// per-specialization kiln_config.cuh stays out of it: NVRTC 13.0 does not compare in-memory
// header contents before it reuses a PCH (see server/jit/pch_key.h).
namespace kiln_act_and_mul_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_ACT_KIND) || !defined(KILN_ACT_T) || !defined(KILN_ACT_VEC) || !defined(KILN_ACT_BLOCK) || \
    !defined(KILN_ACT_ITEMS)
#error "kiln_config.cuh must define every KILN_ACT_* parameter (see act_and_mul_generator.cpp)"
#endif

using Shape = kiln::activation::ActAndMulShape<KILN_ACT_T, KILN_ACT_VEC, KILN_ACT_BLOCK, KILN_ACT_ITEMS>;
using T = Shape::T;

// Launch (every entry; kiln/activation/activation_contract.h): grid.x = rows * ceil(d /
// cols_per_block), block.x = block (launch hints), no dynamic shared memory.
#define KILN_ACT_ENTRY(name, Act)                                                                                \
  extern "C" __global__ void __launch_bounds__(Shape::kBlock) name(const kiln::activation::ActAndMulParams p) {  \
    kiln::GridDependencyBegin();                                                                                 \
    kiln::activation::ActAndMul<Shape, Act>(static_cast<T*>(p.out), static_cast<const T*>(p.input), p.rows, p.d, \
                                            p.out_row_stride, p.input_row_stride);                               \
  }
#if KILN_ACT_KIND == 0
KILN_ACT_ENTRY(kiln_silu_and_mul, kiln::activation::Silu)
#elif KILN_ACT_KIND == 1
KILN_ACT_ENTRY(kiln_gelu_and_mul, kiln::activation::Gelu)
#elif KILN_ACT_KIND == 2
KILN_ACT_ENTRY(kiln_gelu_tanh_and_mul, kiln::activation::GeluTanh)
#else
#error "KILN_ACT_KIND must be 0 (silu), 1 (gelu) or 2 (gelu_tanh)"
#endif
