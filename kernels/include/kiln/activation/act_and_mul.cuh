// Gated activations over rows: input [rows, 2d] → out [rows, d],
//
//   out[r, i] = T(act(float(in[r, i])) * float(in[r, d + i]))      0 <= i < d
//
//   silu       act(x) = x / (1 + exp(-x))
//   gelu       act(x) = 0.5 x (1 + erf(x / sqrt(2)))                    (exact)
//   gelu_tanh  act(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//
// All math in fp32, one rounding to T at the store. silu and gelu_tanh use __expf and
// __fdividef: gelu_tanh through the identity 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), which has
// no cancellation for negative u (1 + tanh(u) would). __expf's error is 2 + 1.173|x| ulp of
// fp32 (about 1e-5 relative at |x| = 80, where the result is already below fp16's range) and
// __fdividef's 2 ulp: far below one rounding to bf16 or fp16 (up to 2^-8 and 2^-11 relative).
// For x < -88 exp overflows to inf and __fdividef(x, inf) is -0, the correctly rounded limit.
// gelu uses erff (2 ulp).
//
// d is a runtime argument: one specialization per (op, dtype, vec) serves every d.
// The grid is rows × chunks, chunks = ceil(d / kColsPerBlock): block b works on row
// b / chunks, columns [chunk * kColsPerBlock, +kColsPerBlock). Each thread holds kItems
// vectors of each half in registers (all its loads are issued before any math), kVec
// elements (up to 16 bytes) per access, strided by kBlock vectors so that a warp's accesses
// are contiguous. kVec must divide d and both row strides, and `in` and `out` must be
// multiples of kVec elements (the generator's "vec" launch hint). `in` and `out` must not
// overlap: the loads go through the read-only path (ld.global.nc).
#pragma once

#include "kiln/common/numeric.cuh"
#include "kiln/common/vec.cuh"

namespace kiln {
namespace activation {

template <typename T_, int kVec_, int kBlock_, int kItems_>
struct ActAndMulShape {
  using T = T_;
  static constexpr int kVec = kVec_;
  static constexpr int kBlock = kBlock_;
  static constexpr int kItems = kItems_;
  // Elements of a half-row (of d) that one block covers.
  static constexpr int kColsPerBlock = kBlock * kItems * kVec;

  static_assert(kVec >= 1 && (kVec & (kVec - 1)) == 0, "vec must be a power of two");
  static_assert(kVec * sizeof(T) <= 16, "a vector access is at most 16 bytes");
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "the block is whole warps, at most 1024");
  static_assert(kItems >= 1 && kItems <= 32, "a thread holds 1 to 32 vectors of each half");
};

struct Silu {
  static __device__ __forceinline__ float Apply(float x) { return __fdividef(x, 1.0f + __expf(-x)); }
};

struct Gelu {
  static __device__ __forceinline__ float Apply(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
};

struct GeluTanh {
  static __device__ __forceinline__ float Apply(float x) {
    // 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
    const float u = 0.79788456080286536f * fmaf(0.044715f * x, x * x, x);
    return __fdividef(x, 1.0f + __expf(-2.0f * u));
  }
};

namespace detail {

// A vector load through the read-only (non-coherent) path, ld.global.nc: legal because `in`
// is never written during the kernel (it does not overlap `out`). NVRTC does not infer .nc
// from __restrict__ here, so it is asked for by size.
template <int N, typename T>
__device__ __forceinline__ Vec<T, N> LoadReadOnly(const T* p) {
  constexpr int kBytes = static_cast<int>(sizeof(Vec<T, N>));
  Vec<T, N> value;
  if constexpr (kBytes == 16) {
    *reinterpret_cast<uint4*>(&value) = __ldg(reinterpret_cast<const uint4*>(p));
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(&value) = __ldg(reinterpret_cast<const uint2*>(p));
  } else if constexpr (kBytes == 4) {
    *reinterpret_cast<unsigned*>(&value) = __ldg(reinterpret_cast<const unsigned*>(p));
  } else if constexpr (kBytes == 2) {
    *reinterpret_cast<unsigned short*>(&value) = __ldg(reinterpret_cast<const unsigned short*>(p));
  } else {
    value = LoadVec<N>(p);
  }
  return value;
}

// act(a) * b, element-wise in fp32, two 16-bit elements per conversion where possible.
template <class Act, typename T, int N>
__device__ __forceinline__ Vec<T, N> ActTimes(const Vec<T, N>& a, const Vec<T, N>& b) {
  Vec<T, N> out;
  if constexpr (sizeof(T) == 2 && N % 2 == 0) {
    using Pair = typename PairOf<T>::type;
    const Pair* a2 = reinterpret_cast<const Pair*>(a.v);
    const Pair* b2 = reinterpret_cast<const Pair*>(b.v);
    Pair* out2 = reinterpret_cast<Pair*>(out.v);
#pragma unroll
    for (int j = 0; j < N / 2; ++j) {
      const float2 af = ToFloat2(a2[j]), bf = ToFloat2(b2[j]);
      out2[j] = FromFloat2<Pair>(Act::Apply(af.x) * bf.x, Act::Apply(af.y) * bf.y);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out.v[j] = FromFloat<T>(Act::Apply(ToFloat(a.v[j])) * ToFloat(b.v[j]));
  }
  return out;
}

}  // namespace detail

// One block's part of `out`; see the contract above. d >= 1 and rows * chunks <= gridDim.x
// (blocks past the last row return).
template <class Shape, class Act>
__device__ __forceinline__ void ActAndMul(typename Shape::T* __restrict__ out, const typename Shape::T* __restrict__ in,
                                          long long rows, int d, long long out_row_stride, long long in_row_stride) {
  using T = typename Shape::T;
  constexpr int kVec = Shape::kVec;
  constexpr int kStride = Shape::kBlock * kVec;  // elements between a thread's vectors
  // One 32-bit division per block: blockIdx.x < 2^31 and chunks >= 1.
  const unsigned chunks = (static_cast<unsigned>(d) + Shape::kColsPerBlock - 1) / Shape::kColsPerBlock;
  const unsigned row = blockIdx.x / chunks;
  if (row >= rows) return;
  const int first = static_cast<int>(blockIdx.x - row * chunks) * Shape::kColsPerBlock +
                    static_cast<int>(threadIdx.x) * kVec;
  const T* gate = in + static_cast<long long>(row) * in_row_stride;
  const T* up = gate + d;
  T* out_row = out + static_cast<long long>(row) * out_row_stride;

  // Every load first: 2 * kItems independent 16-byte loads in flight per thread.
  Vec<T, kVec> a[Shape::kItems], b[Shape::kItems];
#pragma unroll
  for (int i = 0; i < Shape::kItems; ++i) {
    const int c = first + i * kStride;
    if (c < d) {  // kVec divides d: a vector that starts inside the row ends inside it
      a[i] = detail::LoadReadOnly<kVec>(gate + c);
      b[i] = detail::LoadReadOnly<kVec>(up + c);
    }
  }
#pragma unroll
  for (int i = 0; i < Shape::kItems; ++i) {
    const int c = first + i * kStride;
    if (c < d) StoreVec<kVec>(out_row + c, detail::ActTimes<Act>(a[i], b[i]));
  }
}

}  // namespace activation
}  // namespace kiln
