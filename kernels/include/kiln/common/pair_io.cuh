// Loads and stores of two adjacent elements as fp32 values, whatever the element type (fp32,
// fp16, bf16): one 8- or 4-byte access. The epilogues of the gemm family read bias and C and
// write D by such pairs (their contract keeps pairs aligned: even strides, N a multiple of 8).
#pragma once

#include "kiln/common/numeric.cuh"

namespace kiln {

template <typename T>
__device__ __forceinline__ void LoadPair(const T* p, float& a, float& b);
template <>
__device__ __forceinline__ void LoadPair<float>(const float* p, float& a, float& b) {
  const float2 v = *reinterpret_cast<const float2*>(p);
  a = v.x;
  b = v.y;
}
template <typename T>
__device__ __forceinline__ void LoadPair(const T* p, float& a, float& b) {
  const float2 v = ToFloat2(*reinterpret_cast<const typename PairOf<T>::type*>(p));
  a = v.x;
  b = v.y;
}

template <typename T>
__device__ __forceinline__ void StorePair(T* p, float a, float b);
template <>
__device__ __forceinline__ void StorePair<float>(float* p, float a, float b) {
  *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
template <typename T>
__device__ __forceinline__ void StorePair(T* p, float a, float b) {
  using Pair = typename PairOf<T>::type;
  *reinterpret_cast<Pair*>(p) = FromFloat2<Pair>(a, b);
}

}  // namespace kiln
