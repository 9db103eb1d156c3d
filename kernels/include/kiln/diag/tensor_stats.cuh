// Statistics of one tensor for API call logging (KILN_LOGLEVEL=5): over the numel elements
// that a shape and strides describe,
//
//   nan_count     elements that are NaN           (float dtypes only; 0 for integers)
//   inf_count     elements that are +Inf or -Inf  (float dtypes only)
//   finite_count  the others
//   min, max      over the finite elements, as double: exact for every dtype but int64, whose
//                 values beyond 2^53 round to the nearest double (conversion is monotone, so
//                 min and max are the rounded extremes)
//   sum           over the finite elements, in double; mean = sum / finite_count on the host
//
// Each block writes one TensorStatsPartial (no atomics: the result depends only on the
// launch, never on timing). Threads accumulate in double over a grid-stride loop, then the
// block reduces with xor shuffles and one record per warp in shared memory.
//
// The layout is passed by value. Offsets are in elements; strides of any sign are read as
// given, and a dim may repeat addresses (stride 0): every logical element is counted once per
// logical index. The host (client/diag/tensor_stats.cpp) normally gives a normalized layout
// (size-1 dims dropped, negative strides flipped, dims ordered outer to inner, mergeable dims
// merged), since the statistics do not depend on the order of the elements; a dense tensor
// then arrives as ndim 1, stride 1, and takes the contiguous path (16-byte loads after an
// unaligned head of at most 15 bytes). Otherwise each element's offset comes from its
// logical index by division, in 32-bit arithmetic when numel < 2^32.
//
// Contract: 1 <= ndim <= kMaxStatsDims; shape[d] >= 1; numel = product of the shape, >= 1;
// `data` aligned to the element size; every offset times the element size fits in a signed
// 64-bit integer; `partials` holds gridDim.x records. The block size is the Shape's kBlock.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kiln/diag/diag_contract.h"  // TensorStatsLayout, TensorStatsPartial

namespace kiln {
namespace diag {

template <typename T_, int kBlock_>
struct TensorStatsShape {
  using T = T_;
  static constexpr int kBlock = kBlock_;
  static constexpr int kWarps = kBlock / 32;
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte load
  // __launch_bounds__' minimum of resident blocks: a full SM (2048 threads), which caps
  // ptxas at 32 registers; without it sm_90a took 34 and fit only 6 blocks of 256 per SM.
  static constexpr int kMinBlocksPerSm = 2048 / kBlock;

  static_assert(kBlock % 32 == 0 && kBlock >= 32 && kBlock <= 1024, "the block is 1 to 32 whole warps");
  static_assert(16 % sizeof(T) == 0, "an element is 1, 2, 4 or 8 bytes");
};

namespace detail {

__device__ __forceinline__ double PlusInfinity() { return __longlong_as_double(0x7ff0000000000000LL); }

// Element → double, exactly (int64 beyond 2^53 rounds to nearest). NaN and Inf survive.
__device__ __forceinline__ double ToDouble(float x) { return static_cast<double>(x); }
__device__ __forceinline__ double ToDouble(__half x) { return static_cast<double>(__half2float(x)); }
__device__ __forceinline__ double ToDouble(__nv_bfloat16 x) {
  return static_cast<double>(__uint_as_float(static_cast<unsigned>(__bfloat16_as_ushort(x)) << 16));
}
__device__ __forceinline__ double ToDouble(signed char x) { return static_cast<double>(x); }
__device__ __forceinline__ double ToDouble(unsigned char x) { return static_cast<double>(x); }
__device__ __forceinline__ double ToDouble(int x) { return static_cast<double>(x); }
__device__ __forceinline__ double ToDouble(long long x) { return static_cast<double>(x); }

// Integers are never NaN or Inf: their classification compiles away.
template <typename T>
struct IsFloatElement {
  static constexpr bool value = false;
};
template <>
struct IsFloatElement<float> {
  static constexpr bool value = true;
};
template <>
struct IsFloatElement<__half> {
  static constexpr bool value = true;
};
template <>
struct IsFloatElement<__nv_bfloat16> {
  static constexpr bool value = true;
};

// A thread's running statistics. Plain data (no constructor), so it can live in __shared__.
struct Stats {
  long long nan_count;
  long long inf_count;
  long long finite_count;
  double min;
  double max;
  double sum;
};

__device__ __forceinline__ Stats EmptyStats() {
  Stats s;
  s.nan_count = 0;
  s.inf_count = 0;
  s.finite_count = 0;
  s.min = PlusInfinity();
  s.max = -PlusInfinity();
  s.sum = 0.0;
  return s;
}

template <typename T>
__device__ __forceinline__ void Add(Stats& s, T x) {
  const double v = ToDouble(x);
  if constexpr (IsFloatElement<T>::value) {
    // No fast-math in this unit: v != v is the NaN test and fabs(v) == inf the Inf test.
    if (v != v) {
      ++s.nan_count;
      return;
    }
    if (fabs(v) == PlusInfinity()) {
      ++s.inf_count;
      return;
    }
  }
  ++s.finite_count;
  s.min = fmin(s.min, v);
  s.max = fmax(s.max, v);
  s.sum += v;
}

__device__ __forceinline__ void Merge(Stats& s, const Stats& o) {
  s.nan_count += o.nan_count;
  s.inf_count += o.inf_count;
  s.finite_count += o.finite_count;
  s.min = fmin(s.min, o.min);  // both are +inf without finite elements: fmin keeps +inf
  s.max = fmax(s.max, o.max);
  s.sum += o.sum;
}

// Butterfly over the warp: every lane ends with the same bits, in an order fixed by the lane
// numbers (deterministic).
__device__ __forceinline__ void WarpMerge(Stats& s) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    Stats o;
    o.nan_count = __shfl_xor_sync(0xffffffffu, s.nan_count, offset);
    o.inf_count = __shfl_xor_sync(0xffffffffu, s.inf_count, offset);
    o.finite_count = __shfl_xor_sync(0xffffffffu, s.finite_count, offset);
    o.min = __shfl_xor_sync(0xffffffffu, s.min, offset);
    o.max = __shfl_xor_sync(0xffffffffu, s.max, offset);
    o.sum = __shfl_xor_sync(0xffffffffu, s.sum, offset);
    Merge(s, o);
  }
}

// Elements [0, n) of a dense array: an unaligned head (fewer than kVec elements, up to the
// first 16-byte boundary), then 16-byte vectors over the grid, then a tail of fewer than kVec.
template <class Shape>
__device__ __forceinline__ void AccumulateContiguous(Stats& s, const typename Shape::T* __restrict__ p, long long n,
                                                     long long thread, long long threads) {
  using T = typename Shape::T;
  constexpr int kVec = Shape::kVec;
  const unsigned misaligned_bytes = static_cast<unsigned>(reinterpret_cast<unsigned long long>(p) & 15u);
  long long head = misaligned_bytes == 0 ? 0 : (16 - misaligned_bytes) / sizeof(T);
  if (head > n) head = n;
  const long long vectors = (n - head) / kVec;
  const long long tail_begin = head + vectors * kVec;
  if (thread < head) Add(s, p[thread]);
  if (thread < n - tail_begin) Add(s, p[tail_begin + thread]);
  const uint4* v = reinterpret_cast<const uint4*>(p + head);
  for (long long i = thread; i < vectors; i += threads) {
    const uint4 raw = __ldg(v + i);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < kVec; ++j) Add(s, e[j]);
  }
}

// The element offset of logical (row-major) index i. Index is unsigned or unsigned long long:
// 32-bit division is several times cheaper, and numel < 2^32 bounds every quotient.
template <typename Index>
__device__ __forceinline__ long long ElementOffset(Index i, const TensorStatsLayout& layout) {
  long long offset = 0;
#pragma unroll
  for (int d = kMaxStatsDims - 1; d > 0; --d) {
    if (d < layout.ndim) {
      const Index size = static_cast<Index>(layout.shape[d]);
      const Index q = i / size;
      offset += static_cast<long long>(i - q * size) * layout.strides[d];
      i = q;
    }
  }
  return offset + static_cast<long long>(i) * layout.strides[0];
}

template <class Shape, typename Index>
__device__ __forceinline__ void AccumulateStrided(Stats& s, const typename Shape::T* __restrict__ p, long long n,
                                                  const TensorStatsLayout& layout, long long thread,
                                                  long long threads) {
  for (long long i = thread; i < n; i += threads) Add(s, p[ElementOffset(static_cast<Index>(i), layout)]);
}

}  // namespace detail

// One block's part: partials[blockIdx.x] = the statistics of the logical elements
// thread, thread + threads, ... (thread = the global thread index, threads = the grid's).
template <class Shape>
__device__ __forceinline__ void TensorStats(TensorStatsPartial* __restrict__ partials, const void* data,
                                            long long numel, const TensorStatsLayout& layout) {
  using T = typename Shape::T;
  const T* p = static_cast<const T*>(data);
  const long long thread = static_cast<long long>(blockIdx.x) * Shape::kBlock + threadIdx.x;
  const long long threads = static_cast<long long>(gridDim.x) * Shape::kBlock;

  detail::Stats s = detail::EmptyStats();
  if (layout.ndim == 1 && layout.strides[0] == 1) {
    detail::AccumulateContiguous<Shape>(s, p, numel, thread, threads);
  } else if (numel <= 0xffffffffLL) {
    detail::AccumulateStrided<Shape, unsigned>(s, p, numel, layout, thread, threads);
  } else {
    detail::AccumulateStrided<Shape, unsigned long long>(s, p, numel, layout, thread, threads);
  }

  detail::WarpMerge(s);
  __shared__ detail::Stats warp_stats[Shape::kWarps];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) warp_stats[warp] = s;
  __syncthreads();
  if (warp != 0) return;
  s = lane < Shape::kWarps ? warp_stats[lane] : detail::EmptyStats();
  detail::WarpMerge(s);
  if (lane == 0) {
    TensorStatsPartial out;
    out.nan_count = s.nan_count;
    out.inf_count = s.inf_count;
    out.finite_count = s.finite_count;
    out.min = s.min;
    out.max = s.max;
    out.sum = s.sum;
    partials[blockIdx.x] = out;
  }
}

}  // namespace diag
}  // namespace kiln
