// Rotary position embedding (RoPE), in place on the query and key heads of a batch of tokens:
// ops apply_rope (angles from the positions and theta) and apply_rope_with_cos_sin_cache
// (angles read from a precomputed fp32 table).
//
// For token t at position p and pair i < kRotaryDim / 2 of every head of q and k:
//   (x1, x2) = NeoX: (x[i], x[i + kRotaryDim/2])    GPT-J (interleaved): (x[2i], x[2i + 1])
//   x1' = x1 cos(p w_i) - x2 sin(p w_i),   x2' = x2 cos(p w_i) + x1 sin(p w_i)
// in fp32, one rounding to T. Elements from kRotaryDim on are neither read nor written.
//   apply_rope:  w_i = theta^(-2i / kRotaryDim), optionally Llama-3.1 scaled (Frequency()).
//   cache:       cos = cache[p][i], sin = cache[p][kRotaryDim/2 + i] (vLLM's layout); a
//                position outside [0, max_position) leaves its token untouched (no read).
//
// Work split: a thread owns kVec pairs of one token (two vectors of kVec elements per head:
// NeoX one from each half, GPT-J two adjacent), computes their cos/sin once, and applies them
// to the heads h = blockIdx.y, blockIdx.y + gridDim.y, ... of q then k, kHeadsInFlight heads
// at a time. kThreadsPerToken = kRotaryDim / 2 / kVec threads hold a token; a block holds
// kTokensPerBlock tokens. gridDim.y (the head groups) is the host's choice: more groups for
// few tokens (latency), fewer for many (cos/sin computed fewer times).
//
// Angles: p * w_i reaches 1e5 rad and more, where fp32 has 2^-7 rad steps and __sinf is
// wrong. The kernel keeps w_i / (2 pi) in double, takes the fraction of p * w_i / (2 pi) in
// double, and evaluates sincospif on that fraction (|x| <= 1): the angle error stays at
// fp32 rounding (~1e-7), whatever the position.
//
// Alignment: q, k and their token and head strides are multiples of kVec elements; the cache
// pointer and its row stride are multiples of kCacheVec floats. Aliasing: the (token, head)
// rows of q and k touch disjoint elements (q and k may be views into one fused qkv buffer);
// positions and the cache are only read and overlap neither.
#pragma once

#include "kiln/common/numeric.cuh"
#include "kiln/common/vec.cuh"
#include "kiln/rope/rope_contract.h"

namespace kiln {
namespace rope {

template <typename T_, typename Pos_, int kRotaryDim_, int kVec_, bool kInterleaved_, int kTokensPerBlock_>
struct RopeShape {
  using T = T_;
  using Pos = Pos_;  // int (int32) or long long (int64)
  static constexpr int kRotaryDim = kRotaryDim_;
  static constexpr int kPairs = kRotaryDim / 2;
  static constexpr int kVec = kVec_;
  static constexpr bool kInterleaved = kInterleaved_;
  static constexpr int kThreadsPerToken = kPairs / kVec;
  static constexpr int kTokensPerBlock = kTokensPerBlock_;
  static constexpr int kBlock = kThreadsPerToken * kTokensPerBlock;
  // Loads of this many heads are issued before the first of them is rotated.
  static constexpr int kHeadsInFlight = 2;
  // The cache's fp32 vectors: at most 16 bytes, and within the thread's kVec pairs.
  static constexpr int kCacheVec = kVec < 4 ? kVec : 4;

  static_assert(kRotaryDim >= 2 && kRotaryDim % 2 == 0, "rotary_dim must be even and positive");
  static_assert(kVec >= 1 && (kVec & (kVec - 1)) == 0, "vec must be a power of two");
  static_assert(kPairs % kVec == 0, "vec must divide rotary_dim / 2");
  static_assert(kVec * sizeof(T) <= 16, "a vector access is at most 16 bytes");
  static_assert(sizeof(T) == 2, "q and k are fp16 or bf16");
  static_assert(sizeof(Pos) == 4 || sizeof(Pos) == 8, "positions are int32 or int64");
  static_assert(kTokensPerBlock >= 1, "a block holds at least one token");
  static_assert(kBlock >= 1 && kBlock <= 1024, "a block is 1..1024 threads");
};

// Where q and k are, in elements; the same for both ops.
struct RopeHeads {
  void* q;
  void* k;
  long long q_token_stride;
  long long q_head_stride;
  long long k_token_stride;
  long long k_head_stride;
  int q_heads;
  int k_heads;
};

namespace detail {

constexpr double kInverseTwoPi = 0.15915494309189533577;  // 1 / (2 pi)
constexpr double kTwoPi = 6.28318530717958647693;

// w_i / (2 pi) in double: theta^(-2i / rotary_dim), then, when factor > 0, the Llama-3.1 rule:
// wavelength = 2 pi / w; longer than original / low_freq_factor: w / factor; shorter than
// original / high_freq_factor: w; between: (1 - s) w / factor + s w with
// s = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor).
__device__ __forceinline__ double TurnsPerPosition(int pair, int rotary_dim, double log2_theta, double factor,
                                                   double low_freq_factor, double high_freq_factor, double original) {
  double w = exp2(-(2.0 * pair / rotary_dim) * log2_theta);
  if (factor > 0.0) {
    const double wavelength = kTwoPi / w;
    if (wavelength > original / low_freq_factor) {
      w = w / factor;
    } else if (!(wavelength < original / high_freq_factor)) {
      const double smooth = (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
      w = (1.0 - smooth) * w / factor + smooth * w;
    }
  }
  return w * kInverseTwoPi;
}

// cos and sin of 2 pi * position * turns, through the fraction of a turn (see the top).
__device__ __forceinline__ void SinCosOfTurns(double position, double turns, float* sin_out, float* cos_out) {
  double t = position * turns;
  t -= rint(t);  // in [-0.5, 0.5]
  sincospif(static_cast<float>(2.0 * t), sin_out, cos_out);
}

// The thread's two vectors inside a head: NeoX one in each half, GPT-J two adjacent ones.
template <class Shape>
__device__ __forceinline__ int FirstOffset(int lane) {
  return Shape::kInterleaved ? 2 * lane * Shape::kVec : lane * Shape::kVec;
}
template <class Shape>
__device__ __forceinline__ int SecondOffset(int lane) {
  return FirstOffset<Shape>(lane) + (Shape::kInterleaved ? Shape::kVec : Shape::kPairs);
}

// Rotates the thread's kVec pairs of one head, held as vectors a and b; pair m uses cosines[m]
// and sines[m]. NeoX pairs are (a[m], b[m]); GPT-J pairs are elements (2m, 2m + 1) of a then b.
template <class Shape>
__device__ __forceinline__ void Rotate(Vec<typename Shape::T, Shape::kVec>& a, Vec<typename Shape::T, Shape::kVec>& b,
                                       const float (&cosines)[Shape::kVec], const float (&sines)[Shape::kVec]) {
  using T = typename Shape::T;
  constexpr int kVec = Shape::kVec;
  float x[2 * kVec];  // a then b; every index below is a constant after unrolling: registers
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    x[j] = ToFloat(a.v[j]);
    x[kVec + j] = ToFloat(b.v[j]);
  }
#pragma unroll
  for (int m = 0; m < kVec; ++m) {
    const int i1 = Shape::kInterleaved ? 2 * m : m;
    const int i2 = Shape::kInterleaved ? 2 * m + 1 : kVec + m;
    const float x1 = x[i1], x2 = x[i2];
    x[i1] = fmaf(x1, cosines[m], -x2 * sines[m]);
    x[i2] = fmaf(x2, cosines[m], x1 * sines[m]);
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    a.v[j] = FromFloat<T>(x[j]);
    b.v[j] = FromFloat<T>(x[kVec + j]);
  }
}

// kHeadsInFlight heads of one token, from combined head index h0 on (q's heads first, then
// k's), gridDim.y apart: loaded together, rotated and stored by Finish().
template <class Shape>
struct HeadBatch {
  using T = typename Shape::T;
  static constexpr int kCount = Shape::kHeadsInFlight;
  Vec<T, Shape::kVec> a[kCount], b[kCount];
  T* head[kCount];

  __device__ __forceinline__ void Load(const RopeHeads& h, long long token, int lane, int h0) {
    const int heads = h.q_heads + h.k_heads;
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
      const int index = h0 + u * static_cast<int>(gridDim.y);
      head[u] = nullptr;
      if (index < heads) {
        head[u] = index < h.q_heads
                      ? static_cast<T*>(h.q) + token * h.q_token_stride + index * h.q_head_stride
                      : static_cast<T*>(h.k) + token * h.k_token_stride + (index - h.q_heads) * h.k_head_stride;
        a[u] = LoadVec<Shape::kVec>(head[u] + FirstOffset<Shape>(lane));
        b[u] = LoadVec<Shape::kVec>(head[u] + SecondOffset<Shape>(lane));
      }
    }
  }

  __device__ __forceinline__ void Finish(int lane, const float (&cosines)[Shape::kVec],
                                         const float (&sines)[Shape::kVec]) {
#pragma unroll
    for (int u = 0; u < kCount; ++u) {
      if (head[u] != nullptr) {
        Rotate<Shape>(a[u], b[u], cosines, sines);
        StoreVec<Shape::kVec>(head[u] + FirstOffset<Shape>(lane), a[u]);
        StoreVec<Shape::kVec>(head[u] + SecondOffset<Shape>(lane), b[u]);
      }
    }
  }
};

// The heads after the first batch (whose loads were issued before the angles were known).
template <class Shape>
__device__ __forceinline__ void RotateRemainingHeads(const RopeHeads& h, long long token, int lane,
                                                     const float (&cosines)[Shape::kVec],
                                                     const float (&sines)[Shape::kVec]) {
  const int heads = h.q_heads + h.k_heads;
  const int step = static_cast<int>(gridDim.y) * Shape::kHeadsInFlight;
  for (int h0 = static_cast<int>(blockIdx.y) + step; h0 < heads; h0 += step) {
    HeadBatch<Shape> batch;
    batch.Load(h, token, lane, h0);
    batch.Finish(lane, cosines, sines);
  }
}

template <class Shape>
__device__ __forceinline__ long long TokenOfThread() {
  return static_cast<long long>(blockIdx.x) * Shape::kTokensPerBlock + threadIdx.x / Shape::kThreadsPerToken;
}

}  // namespace detail

// apply_rope. `factor` <= 0: no Llama-3.1 scaling (the other three are then unused).
template <class Shape>
__device__ __forceinline__ void ApplyRope(const RopeHeads& heads, const typename Shape::Pos* __restrict__ positions,
                                          long long tokens, double log2_theta, double factor, double low_freq_factor,
                                          double high_freq_factor, double original_max_position) {
  // w_i / (2 pi) of every pair, once per block (double exp2 is too slow per token and pair).
  __shared__ double turns[Shape::kPairs];
  for (int i = threadIdx.x; i < Shape::kPairs; i += Shape::kBlock) {
    turns[i] = detail::TurnsPerPosition(i, Shape::kRotaryDim, log2_theta, factor, low_freq_factor, high_freq_factor,
                                        original_max_position);
  }
  const int lane = threadIdx.x % Shape::kThreadsPerToken;
  const long long token = detail::TokenOfThread<Shape>();
  const bool active = token < tokens;
  // The position and the first heads are loaded before the barrier, so their latency overlaps
  // the table above.
  long long position = 0;
  detail::HeadBatch<Shape> first;
  if (active) {
    position = static_cast<long long>(positions[token]);
    first.Load(heads, token, lane, static_cast<int>(blockIdx.y));
  }
  __syncthreads();  // every thread reaches it: `turns` is complete after it
  if (!active) return;

  float cosines[Shape::kVec], sines[Shape::kVec];
  const double p = static_cast<double>(position);
#pragma unroll
  for (int m = 0; m < Shape::kVec; ++m) {
    detail::SinCosOfTurns(p, turns[lane * Shape::kVec + m], &sines[m], &cosines[m]);
  }
  first.Finish(lane, cosines, sines);
  detail::RotateRemainingHeads<Shape>(heads, token, lane, cosines, sines);
}

// apply_rope_with_cos_sin_cache: cos_sin_cache is [max_position, >= kRotaryDim] fp32 with
// rows cache_stride floats apart.
template <class Shape>
__device__ __forceinline__ void ApplyRopeWithCosSinCache(const RopeHeads& heads,
                                                         const typename Shape::Pos* __restrict__ positions,
                                                         long long tokens, const float* __restrict__ cos_sin_cache,
                                                         long long max_position, long long cache_stride) {
  const int lane = threadIdx.x % Shape::kThreadsPerToken;
  const long long token = detail::TokenOfThread<Shape>();
  if (token >= tokens) return;
  const long long position = static_cast<long long>(positions[token]);
  detail::HeadBatch<Shape> first;
  first.Load(heads, token, lane, static_cast<int>(blockIdx.y));  // overlaps the position's latency
  // Out of range is the caller's bug; the token is left as it was, and nothing is read.
  if (position < 0 || position >= max_position) return;

  float cosines[Shape::kVec], sines[Shape::kVec];
  const float* row = cos_sin_cache + position * cache_stride + lane * Shape::kVec;
#pragma unroll
  for (int m = 0; m < Shape::kVec; m += Shape::kCacheVec) {
    const Vec<float, Shape::kCacheVec> c = LoadVec<Shape::kCacheVec>(row + m);
    const Vec<float, Shape::kCacheVec> s = LoadVec<Shape::kCacheVec>(row + Shape::kPairs + m);
#pragma unroll
    for (int j = 0; j < Shape::kCacheVec; ++j) {
      cosines[m + j] = c.v[j];
      sines[m + j] = s.v[j];
    }
  }
  first.Finish(lane, cosines, sines);
  detail::RotateRemainingHeads<Shape>(heads, token, lane, cosines, sines);
}

}  // namespace rope
}  // namespace kiln
