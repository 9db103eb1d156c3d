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

// The 32-bit registers one row copy takes per thread (a 2-byte scalar still takes one), and what
// __launch_bounds__(kBlock) leaves a thread.
template <class Shape>
__host__ __device__ constexpr int RowRegisters() {
  using T = typename Shape::T;
  return Shape::kItemsPerThread * (Shape::kVec * sizeof(T) >= 4 ? Shape::kVec * sizeof(T) / 4 : 1);
}
template <class Shape>
__host__ __device__ constexpr int RegisterBudget() {
  return 65536 / Shape::kBlock < 255 ? 65536 / Shape::kBlock : 255;
}

// Whether a thread keeps the weights of its vector slots in registers beside the row (with 32
// to spare). Then they are loaded first, before the row: a few-row call is latency-bound, and
// weights loaded with the row arrive with it, while weights loaded after the reduction add a
// second global-memory round trip to every call. Wider rows load them after the reduction, as
// they would spill.
template <class Shape>
__host__ __device__ constexpr bool PrefetchWeights() {
  return 2 * RowRegisters<Shape>() + 32 <= RegisterBudget<Shape>();
}

// This thread's weight vectors (the slots inside the row).
template <class Shape>
__device__ __forceinline__ void LoadWeights(Vec<typename Shape::T, Shape::kVec> (&w)[Shape::kItemsPerThread],
                                            const typename Shape::T* __restrict__ weight, int lane) {
#pragma unroll
  for (int i = 0; i < Shape::kItemsPerThread; ++i) {
    const int v = lane + i * Shape::kThreadsPerRow;
    if (InRow<Shape>(i, v)) w[i] = LoadVec<Shape::kVec>(weight + v * Shape::kVec);
  }
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

  constexpr bool kPrefetchWeights = detail::PrefetchWeights<Shape>();
  Vec<T, kVec> w[Shape::kItemsPerThread];
  if constexpr (kPrefetchWeights) {
    if (active) detail::LoadWeights<Shape>(w, weight, lane);
  }
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
      if constexpr (!kPrefetchWeights) w[i] = LoadVec<kVec>(weight + v * kVec);
      StoreVec<kVec>(out_row + v * kVec, detail::Scale(x[i], inv_rms, w[i]));
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

  constexpr bool kPrefetchWeights = detail::PrefetchWeights<Shape>();
  Vec<T, kVec> w[Shape::kItemsPerThread];
  if constexpr (kPrefetchWeights) {
    if (active) detail::LoadWeights<Shape>(w, weight, lane);
  }
  Vec<T, kVec> x[Shape::kItemsPerThread];
  float sum_of_squares = 0.0f;
  if (active) {
    const T* input_row = input + row * input_row_stride;
    T* residual_row = residual + row * residual_row_stride;
    // Every load before the first store where the residual's copy fits in registers too: the
    // PTX carries no __restrict__, so ptxas cannot move a later slot's loads above an earlier
    // slot's residual store, and a loop that loads, adds and stores slot by slot waits one
    // global-memory round trip per slot. Wider rows go slot by slot (they have many warps in
    // flight per SM to hide it).
    constexpr int kCopies = kPrefetchWeights ? 3 : 2;
    constexpr bool kLoadAllFirst = kCopies * detail::RowRegisters<Shape>() + 32 <= detail::RegisterBudget<Shape>();
    Vec<T, kVec> r[kLoadAllFirst ? Shape::kItemsPerThread : 1];
    if constexpr (kLoadAllFirst) {
#pragma unroll
      for (int i = 0; i < Shape::kItemsPerThread; ++i) {
        const int v = lane + i * Shape::kThreadsPerRow;
        if (detail::InRow<Shape>(i, v)) {
          x[i] = LoadVec<kVec>(input_row + v * kVec);
          r[i] = LoadVec<kVec>(residual_row + v * kVec);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < Shape::kItemsPerThread; ++i) {
      const int v = lane + i * Shape::kThreadsPerRow;
      if (detail::InRow<Shape>(i, v)) {
        if constexpr (kLoadAllFirst) {
          x[i] = detail::Combine(x[i], r[i], [](float a, float b) { return a + b; });
        } else {
          x[i] = detail::Combine(LoadVec<kVec>(input_row + v * kVec), LoadVec<kVec>(residual_row + v * kVec),
                                 [](float a, float b) { return a + b; });
        }
        StoreVec<kVec>(residual_row + v * kVec, x[i]);
        sum_of_squares += detail::SumOfSquares(x[i]);
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
