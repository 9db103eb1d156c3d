// One 128-column scale group of fp32 activations to e4m3 codes, by fused_moe_fp8's rule
// (kiln/moe/moe_contract.h: scale = max(amax, kFp8MinAmax) / kFp8E4M3Max, an IEEE division;
// code = e4m3(v / scale), round to nearest even, saturated). Two kernels quantize this way and
// must give the same codes for the same values: fused_moe_fp8's own quantizers
// (kiln/moe/fused_moe_fp8.cuh) and the grouped fp8 GEMM's silu_and_mul epilogue with e4m3 output
// (kiln/gemm/gemm_sm90.cuh), which quantizes silu(gate) * up from its accumulators.
#pragma once

#include "kiln/moe/moe_contract.h"

namespace kiln {
namespace moe {

// Two fp32 values to two e4m3 codes, `low` in the low byte (PTX ISA, cvt: the first source
// goes to the upper half of the result).
__device__ __forceinline__ unsigned short ToE4m3x2(float low, float high) {
  unsigned short packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(high), "f"(low));
  return packed;
}

// The largest finite fp32: a scale above it is an infinite amax's.
constexpr float kFloatMax = 3.40282347e+38f;

// rcp.approx of a normal scale (MUFU.RCP: within an ulp), for RefinedReciprocal.
__device__ __forceinline__ float ApproxReciprocal(float scale) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(scale));
  return r;
}

// A group's scale from the largest |v| of its values.
__device__ __forceinline__ float Fp8GroupScale(float amax) { return fmaxf(amax, kFp8MinAmax) / kFp8E4M3Max; }

// v / scale for the codes of a group whose scale is `scale` (kCount values): the IEEE quotient
// wherever a code can be nonzero, from the scale's reciprocal refined once (QuotientByScale).
template <int kCount>
__device__ __forceinline__ void QuotientsByScale(const float (&v)[kCount], float scale, float (&x)[kCount]) {
  if (scale <= kFloatMax) {
    const float r = RefinedReciprocal(scale, ApproxReciprocal(scale));
#pragma unroll
    for (int e = 0; e < kCount; ++e) x[e] = QuotientByScale(v[e], scale, r);
  } else {
    // An infinite amax: v * rcp(+inf) = v * +0 is what the division gives there (finite v: a
    // zero of v's sign; an infinity: NaN; NaN: NaN).
#pragma unroll
    for (int e = 0; e < kCount; ++e) x[e] = __fdividef(v[e], scale);
  }
}

}  // namespace moe
}  // namespace kiln
