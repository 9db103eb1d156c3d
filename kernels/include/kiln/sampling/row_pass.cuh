// One pass of a block over one row of probabilities: the row in groups of four consecutive
// tokens (group g = tokens 4g .. 4g+3), group-strided over the block's threads, four groups
// in flight per thread (two with scalar loads). Loads are kVec floats wide (4: one 16-byte load per group), so the
// row pointer, the row stride and the vocabulary size must be multiples of kVec.
//
// Values are handled as the bits of a non-negative float ("sanitized"): for those, unsigned
// order is value order, and the histograms and thresholds of the sampling ops work on bits.
// Negative numbers, -0 and NaN read as +0 (never drawn); +inf stays +inf.
#pragma once

namespace kiln {
namespace sampling {

constexpr int kGroupTokens = 4;  // tokens per group: one Philox call draws for all four
// Groups a thread loads before it uses the first: four (16 tokens) for 16- and 8-byte loads;
// two for scalar loads (eight loads, with fewer registers: four kept the gather pass of top_p
// over 64 registers once it queued its racers).
template <int kVec>
__host__ __device__ constexpr int GroupsInFlight() {
  return kVec == 1 ? 2 : 4;
}

__device__ __forceinline__ unsigned int SanitizedBits(float p) {
  const unsigned int bits = __float_as_uint(p);
  return bits > 0x7f800000u ? 0u : bits;  // sign bit set (negatives, -0) or NaN: +0
}

// The tokens of group g that exist (the last group of a row may be short).
__device__ __forceinline__ int TokensInGroup(int g, int vocab) {
  const int left = vocab - g * kGroupTokens;
  return left < kGroupTokens ? left : kGroupTokens;
}

// The bits of group g as stored; entries past the row are 0 and must be skipped by the
// caller (TokensInGroup), because the ops count tokens.
template <int kVec>
__device__ __forceinline__ void LoadGroup(const float* __restrict__ row, int vocab, int g, unsigned int (&u)[4]) {
  static_assert(kVec == 1 || kVec == 2 || kVec == 4, "vec is 1, 2 or 4 floats");
  const int first = g * kGroupTokens;
  if constexpr (kVec == 4) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(row + first));  // vocab % 4 == 0
    u[0] = __float_as_uint(v.x);
    u[1] = __float_as_uint(v.y);
    u[2] = __float_as_uint(v.z);
    u[3] = __float_as_uint(v.w);
  } else if constexpr (kVec == 2) {
    const float2 a = __ldg(reinterpret_cast<const float2*>(row + first));
    u[0] = __float_as_uint(a.x);
    u[1] = __float_as_uint(a.y);
    u[2] = u[3] = 0u;
    if (first + 2 < vocab) {  // vocab is even: the second pair is whole or absent
      const float2 b = __ldg(reinterpret_cast<const float2*>(row + first + 2));
      u[2] = __float_as_uint(b.x);
      u[3] = __float_as_uint(b.y);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kGroupTokens; ++j) u[j] = first + j < vocab ? __float_as_uint(__ldg(row + first + j)) : 0u;
  }
}

// Calls f(g, u, n) for every group g of the row, n = TokensInGroup(g), each group on exactly
// one thread; u holds SanitizedBits of the values when kSanitize, else their raw bits. `reverse` walks the row from its
// end: a pass that follows another then starts with the part of the row the last one read most recently, which is
// likelier still in L2. The ops are order-independent (integer sums, max with index tie-breaks), so the direction
// changes no result.
// With kRanks > 1 the row is shared by the kRanks blocks of a cluster: block `rank` walks
// every kRanks-th stretch of kThreads groups.
template <int kThreads, int kVec, bool kSanitize = true, int kRanks = 1, class F>
__device__ __forceinline__ void ForEachGroup(const float* __restrict__ row, int vocab, bool reverse, F&& f,
                                             int rank = 0) {
  constexpr int kGroupsInFlight = GroupsInFlight<kVec>();
  constexpr int kRowThreads = kThreads * kRanks;
  const int groups = (vocab + kGroupTokens - 1) / kGroupTokens;
  for (int base = rank * kThreads + threadIdx.x; base < groups; base += kRowThreads * kGroupsInFlight) {
    unsigned int u[kGroupsInFlight][4];
    int g[kGroupsInFlight];
#pragma unroll
    for (int r = 0; r < kGroupsInFlight; ++r) {
      const int i = base + r * kRowThreads;
      g[r] = reverse ? groups - 1 - i : i;
      if (i < groups) LoadGroup<kVec>(row, vocab, g[r], u[r]);
    }
    if constexpr (kSanitize) {
#pragma unroll
      for (int r = 0; r < kGroupsInFlight; ++r) {
#pragma unroll
        for (int j = 0; j < kGroupTokens; ++j) u[r][j] = SanitizedBits(__uint_as_float(u[r][j]));
      }
    }
#pragma unroll
    for (int r = 0; r < kGroupsInFlight; ++r) {
      if (base + r * kRowThreads < groups) f(g[r], u[r], TokensInGroup(g[r], vocab));
    }
  }
}

}  // namespace sampling
}  // namespace kiln
