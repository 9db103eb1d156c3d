// Vec<T, N>: N elements moved as one access of N * sizeof(T) bytes (up to 16: one LDG.128).
// A vector access is legal only at an address aligned to its size; each kernel states that
// alignment in its contract (rmsnorm: pointers and row strides are multiples of "vec").
#pragma once

namespace kiln {

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  static_assert((N & (N - 1)) == 0 && sizeof(T) * N <= 16,
                "a vector is a power-of-two count of elements and at most 16 bytes");
  T v[N];
};

template <int N, typename T>
__device__ __forceinline__ Vec<T, N> LoadVec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <int N, typename T>
__device__ __forceinline__ void StoreVec(T* p, const Vec<T, N>& value) {
  *reinterpret_cast<Vec<T, N>*>(p) = value;
}

}  // namespace kiln
