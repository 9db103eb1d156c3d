// The pieces of a GEMV that streams a weight matrix once (fused_moe's decode path, gemm's
// small-M kernel): a 16-byte weight load kept out of L1, the dot product of two 16-byte units
// of 16-bit elements in fp32 (or of one widened once and used for several rows), and a warp's
// sum in a fixed order.
#pragma once

#include "kiln/common/numeric.cuh"

namespace kiln {

// A weight load read once: not kept in L1 (PTX ISA, "ld": the .L1::no_allocate eviction
// priority, sm_70+), so that the rows multiplied with it stay there; the non-coherent path, as
// the weights do not change during the kernel.
__device__ __forceinline__ uint4 LoadStreamed(const void* address) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(address));
  return v;
}

// acc += w . x over the 8 elements of two 16-byte units, in the order of the elements.
template <typename T>
__device__ __forceinline__ void Dot8(float& acc, const uint4& w, const uint4& x) {
  using P = typename PairOf<T>::type;
  const P* wp = reinterpret_cast<const P*>(&w);
  const P* xp = reinterpret_cast<const P*>(&x);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 a = ToFloat2(wp[q]);
    const float2 b = ToFloat2(xp[q]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
}

// The 8 elements of a 16-byte unit as fp32 (exact).
template <typename T>
__device__ __forceinline__ void Widen8(const uint4& v, float (&out)[8]) {
  using P = typename PairOf<T>::type;
  const P* pairs = reinterpret_cast<const P*>(&v);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 f = ToFloat2(pairs[q]);
    out[2 * q] = f.x;
    out[2 * q + 1] = f.y;
  }
}

// acc += w . x over 8 elements, w already widened, in the order of the elements (Dot8's sums).
template <typename T>
__device__ __forceinline__ void DotWidened8(float& acc, const float (&w)[8], const uint4& x) {
  using P = typename PairOf<T>::type;
  const P* xp = reinterpret_cast<const P*>(&x);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 b = ToFloat2(xp[q]);
    acc = fmaf(w[2 * q], b.x, acc);
    acc = fmaf(w[2 * q + 1], b.y, acc);
  }
}

// The sum over the warp's lanes, in every lane (xor butterfly: the same order in every call).
__device__ __forceinline__ float GemvWarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace kiln
