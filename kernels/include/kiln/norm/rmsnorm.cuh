// RMSNorm and fused add + RMSNorm over rows of `kHidden` contiguous elements, one row per
// group of kThreadsPerRow threads, kRowsPerBlock rows per block.
//
//   rmsnorm:            out = T(float(in) * rsqrt(mean(float(in)^2) + eps) * float(w))
//   fused_add_rmsnorm:  x = T(float(input) + float(residual)); residual = x;
//                       input = T(float(x) * rsqrt(mean(float(x)^2) + eps) * float(w))
//
// Each thread keeps its kItemsPerThread vectors of the row in registers, so every element is
// read from global memory once; loads and stores are kVec elements wide (up to 16 bytes), so
// `in`, `out`, `weight`, `input`, `residual` and the row strides must be multiples of kVec
// elements (the generator's "vec" launch hint). Sums of squares accumulate in fp32.
// rmsnorm may run in place (out == in with equal strides): every thread writes only the
// elements it read itself, after it read all of them. Nothing else may overlap: weight is
// never written, and fused_add_rmsnorm's input, residual and weight are distinct rows.
#pragma once

#include "kiln/common/numeric.cuh"
#include "kiln/common/reduce.cuh"
#include "kiln/common/vec.cuh"

namespace kiln {
namespace norm {

template <typename T_, int kHidden_, int kVec_, int kThreadsPerRow_, int kRowsPerBlock_>
struct RmsNormShape {
  using T = T_;
  static constexpr int kHidden = kHidden_;
  static constexpr int kVec = kVec_;
  static constexpr int kThreadsPerRow = kThreadsPerRow_;
  static constexpr int kRowsPerBlock = kRowsPerBlock_;
  static constexpr int kBlock = kThreadsPerRow * kRowsPerBlock;
  static constexpr int kVecsPerRow = kHidden / kVec;
  static constexpr int kItemsPerThread = (kVecsPerRow + kThreadsPerRow - 1) / kThreadsPerRow;

  static_assert(kHidden >= 1, "hidden must be positive");
  static_assert(kVec >= 1 && (kVec & (kVec - 1)) == 0, "vec must be a power of two");
  static_assert(kHidden % kVec == 0, "vec must divide hidden");
  static_assert(kVec * sizeof(T) <= 16, "a vector access is at most 16 bytes");
  static_assert(kThreadsPerRow <= 32 ? 32 % kThreadsPerRow == 0 : kThreadsPerRow % 32 == 0 && kRowsPerBlock == 1,
                "a row takes a power-of-two part of one warp, or whole warps of a one-row block");
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "the block is whole warps, at most 1024");
  static_assert(kItemsPerThread >= 1, "every thread of a row holds at least one vector slot");
};

namespace detail {

// Whether vector slot i of a thread (vector v of the row) lies inside the row. All slots but
// the last are inside by construction; the last only when the row divides evenly.
template <class Shape>
__device__ __forceinline__ bool InRow(int i, int v) {
  return i + 1 < Shape::kItemsPerThread || Shape::kVecsPerRow % Shape::kThreadsPerRow == 0 || v < Shape::kVecsPerRow;
}

// The sum over the threads of one row; every thread of the block must call it.
template <class Shape>
__device__ __forceinline__ float RowSum(float partial) {
  if constexpr (Shape::kThreadsPerRow <= 32) {
    return WarpSum<Shape::kThreadsPerRow>(partial);
  } else {
    __shared__ float warp_sums[Shape::kBlock / 32];
    return BlockSum<Shape::kBlock>(partial, warp_sums);
  }
}

template <typename T, int N>
__device__ __forceinline__ float SumOfSquares(const Vec<T, N>& x) {
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float f = ToFloat(x.v[j]);
    sum = fmaf(f, f, sum);
  }
  return sum;
}

template <class Shape>
__device__ __forceinline__ float InverseRms(float sum_of_squares, float eps) {
  return rsqrtf(sum_of_squares / static_cast<float>(Shape::kHidden) + eps);
}

// Element-wise f(float a, float b) → T over two vectors, two 16-bit elements at a time.
template <typename T, int N, typename F>
__device__ __forceinline__ Vec<T, N> Combine(const Vec<T, N>& a, const Vec<T, N>& b, F f) {
  Vec<T, N> out;
  if constexpr (sizeof(T) == 2 && N % 2 == 0) {
    using Pair = typename PairOf<T>::type;
    const Pair* a2 = reinterpret_cast<const Pair*>(a.v);
    const Pair* b2 = reinterpret_cast<const Pair*>(b.v);
    Pair* out2 = reinterpret_cast<Pair*>(out.v);
#pragma unroll
    for (int j = 0; j < N / 2; ++j) {
      const float2 af = ToFloat2(a2[j]), bf = ToFloat2(b2[j]);
      out2[j] = FromFloat2<Pair>(f(af.x, bf.x), f(af.y, bf.y));
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out.v[j] = FromFloat<T>(f(ToFloat(a.v[j]), ToFloat(b.v[j])));
  }
  return out;
}

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> Scale(const Vec<T, N>& x, float inv_rms, const Vec<T, N>& w) {
  return Combine(x, w, [inv_rms](float xf, float wf) { return xf * inv_rms * wf; });
}

// The row of this thread; in the last block it may be past `rows` (a partly empty block).
template <class Shape>
__device__ __forceinline__ long long RowOfThread() {
  return static_cast<long long>(blockIdx.x) * Shape::kRowsPerBlock + threadIdx.x / Shape::kThreadsPerRow;
}

}  // namespace detail

template <class Shape>
__device__ __forceinline__ void RmsNorm(typename Shape::T* out, const typename Shape::T* in,
                                        const typename Shape::T* __restrict__ weight, long long rows,
                                        long long out_row_stride, long long in_row_stride, float eps) {
  // `out` and `in` may be the same rows, so neither is __restrict__.
  using T = typename Shape::T;
  constexpr int kVec = Shape::kVec;
  const int lane = threadIdx.x % Shape::kThreadsPerRow;
  const long long row = detail::RowOfThread<Shape>();
  const bool active = row < rows;

  Vec<T, kVec> x[Shape::kItemsPerThread];
  float sum_of_squares = 0.0f;
  if (active) {
    const T* in_row = in + row * in_row_stride;
#pragma unroll
    for (int i = 0; i < Shape::kItemsPerThread; ++i) {
      const int v = lane + i * Shape::kThreadsPerRow;
      if (detail::InRow<Shape>(i, v)) {
        x[i] = LoadVec<kVec>(in_row + v * kVec);
        sum_of_squares += detail::SumOfSquares(x[i]);
      }
    }
  }
  // Threads of absent rows still take part: the reduction needs every lane.
  const float inv_rms = detail::InverseRms<Shape>(detail::RowSum<Shape>(sum_of_squares), eps);
  if (!active) return;

  T* out_row = out + row * out_row_stride;
#pragma unroll
  for (int i = 0; i < Shape::kItemsPerThread; ++i) {
    const int v = lane + i * Shape::kThreadsPerRow;
    if (detail::InRow<Shape>(i, v)) {
      StoreVec<kVec>(out_row + v * kVec, detail::Scale(x[i], inv_rms, LoadVec<kVec>(weight + v * kVec)));
    }
  }
}

template <class Shape>
__device__ __forceinline__ void FusedAddRmsNorm(typename Shape::T* __restrict__ input,
                                                typename Shape::T* __restrict__ residual,
                                                const typename Shape::T* __restrict__ weight, long long rows,
                                                long long input_row_stride, long long residual_row_stride, float eps) {
  using T = typename Shape::T;
  constexpr int kVec = Shape::kVec;
  const int lane = threadIdx.x % Shape::kThreadsPerRow;
  const long long row = detail::RowOfThread<Shape>();
  const bool active = row < rows;

  Vec<T, kVec> x[Shape::kItemsPerThread];
  float sum_of_squares = 0.0f;
  if (active) {
    const T* input_row = input + row * input_row_stride;
    T* residual_row = residual + row * residual_row_stride;
#pragma unroll
    for (int i = 0; i < Shape::kItemsPerThread; ++i) {
      const int v = lane + i * Shape::kThreadsPerRow;
      if (detail::InRow<Shape>(i, v)) {
        x[i] = detail::Combine(LoadVec<kVec>(input_row + v * kVec), LoadVec<kVec>(residual_row + v * kVec),
                               [](float a, float r) { return a + r; });
        StoreVec<kVec>(residual_row + v * kVec, x[i]);
        sum_of_squares += detail::SumOfSquares(x[i]);
      }
    }
  }
  // Where the registers __launch_bounds__ leaves hold the weights beside the row (with 32 to
  // spare), they are loaded before the row's reduction, so their latency hides behind it rather
  // than following the inverse RMS: a few-row call is latency-bound and each serialized global
  // load is a visible part of its time. Wider rows load them after, as they would spill.
  constexpr int kRowRegisters = Shape::kItemsPerThread * (kVec * sizeof(T) >= 4 ? kVec * sizeof(T) / 4 : 1);
  constexpr int kRegisterBudget = 65536 / Shape::kBlock < 255 ? 65536 / Shape::kBlock : 255;
  constexpr bool kPrefetchWeights = 2 * kRowRegisters + 32 <= kRegisterBudget;
  Vec<T, kVec> w[Shape::kItemsPerThread];
  if constexpr (kPrefetchWeights) {
    if (active) {
#pragma unroll
      for (int i = 0; i < Shape::kItemsPerThread; ++i) {
        const int v = lane + i * Shape::kThreadsPerRow;
        if (detail::InRow<Shape>(i, v)) w[i] = LoadVec<kVec>(weight + v * kVec);
      }
    }
  }
  const float inv_rms = detail::InverseRms<Shape>(detail::RowSum<Shape>(sum_of_squares), eps);
  if (!active) return;

  T* input_row = input + row * input_row_stride;
#pragma unroll
  for (int i = 0; i < Shape::kItemsPerThread; ++i) {
    const int v = lane + i * Shape::kThreadsPerRow;
    if (detail::InRow<Shape>(i, v)) {
      if constexpr (!kPrefetchWeights) w[i] = LoadVec<kVec>(weight + v * kVec);
      StoreVec<kVec>(input_row + v * kVec, detail::Scale(x[i], inv_rms, w[i]));
    }
  }
}

}  // namespace norm
}  // namespace kiln
