// Portable element types of Kiln kernels (fp32, fp16, bf16) and their exact conversions to
// and from the fp32 that every kernel accumulates in. Round-to-nearest-even, as PyTorch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kiln {

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
// bf16 is the top half of an fp32, so widening is a shift: exact, one integer instruction,
// and no 16-bit register moves (sm_90's cvt.f32.bf16 costs registers in wide loops).
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) {
  return __uint_as_float(static_cast<unsigned>(__bfloat16_as_ushort(x)) << 16);
}

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Pairs of 16-bit elements convert with one instruction each way where the arch has one
// (cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32 on sm_80+), with the same rounding as FromFloat.
template <typename T>
struct PairOf;
template <>
struct PairOf<__half> {
  using type = __half2;
};
template <>
struct PairOf<__nv_bfloat16> {
  using type = __nv_bfloat162;
};

__device__ __forceinline__ float2 ToFloat2(__half2 x) { return __half22float2(x); }
__device__ __forceinline__ float2 ToFloat2(__nv_bfloat162 x) {
  const unsigned bits = *reinterpret_cast<const unsigned*>(&x);  // .x is the low half
  return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
}

template <typename Pair>
__device__ __forceinline__ Pair FromFloat2(float low, float high);
template <>
__device__ __forceinline__ __half2 FromFloat2<__half2>(float low, float high) {
  return __floats2half2_rn(low, high);
}
template <>
__device__ __forceinline__ __nv_bfloat162 FromFloat2<__nv_bfloat162>(float low, float high) {
  return __floats2bfloat162_rn(low, high);
}

}  // namespace kiln
