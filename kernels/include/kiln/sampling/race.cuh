// The draw of every sampling op: an exponential race. Token i gets a ticket E_i ~ Exp(1),
// independent of everything else, and the sample is the allowed token with the largest
// p_i / E_i. P(i wins) = p_i / (sum of p_j over the allowed set): the renormalized
// distribution over any allowed set, with no renormalization, no prefix sum and no order.
// Each ticket depends only on (seed, offset, row, token), through Philox4x32-10 with
//   counter = (token / 4, row, offset low word, offset high word), key = (seed low, seed high)
// and word token % 4 of the result, so the winner is the same whichever thread, pass or
// launch shape computes it: a call reproduces bit for bit.
//
// The race compares log2(p) - log2(E / ln 2) (a monotone function of p / E) packed with the
// token into 64 bits: one unsigned max picks the largest key and, among equal keys, the lowest
// token. p = 0 gives -inf: a zero never beats a positive probability.
#pragma once

#include "kiln/common/philox.cuh"

namespace kiln {
namespace sampling {

struct RaceSeed {
  unsigned int key0, key1;  // seed
  unsigned int row;
  unsigned int offset0, offset1;
};

// The four random words of group g (tokens 4g .. 4g+3) of this row.
__device__ __forceinline__ Philox4x32Counter GroupRandom(const RaceSeed& s, int g) {
  return Philox4x32({{static_cast<unsigned int>(g), s.row, s.offset0, s.offset1}}, s.key0, s.key1);
}

// Float bits → unsigned in the same order (negative floats reversed below the positives).
__device__ __forceinline__ unsigned int OrderedBits(float x) {
  const unsigned int bits = __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// The packed race entry of a token of (sanitized) bits u with random word r. Never 0.
__device__ __forceinline__ unsigned long long RaceEntry(unsigned int u, int token, unsigned int r) {
  const float p = __uint_as_float(u);
  // E / ln 2 = -log2(U). log2f (not the approximate __log2f) near U = 1, where the result is
  // ~1e-7 and an absolute error of 2^-22 would swamp it; __log2f elsewhere (its absolute error
  // of ~2^-22 in the key is a relative 1e-7 in p / E, below fp32's resolution of p).
  const float e = -log2f(OpenUniform(r));
  const float key = __log2f(p) - __log2f(e);
  return (static_cast<unsigned long long>(OrderedBits(key)) << 32) | static_cast<unsigned int>(~token);
}

__device__ __forceinline__ int RaceWinner(unsigned long long best) {
  return static_cast<int>(~static_cast<unsigned int>(best));
}

// Races the tokens of group g whose bits are at least `lo` (and positive) into `best`. The
// Philox call runs only when one of them takes part.
__device__ __forceinline__ void RaceGroup(const RaceSeed& s, int g, const unsigned int (&u)[4], int n, unsigned int lo,
                                          unsigned long long& best) {
  bool any = false;
#pragma unroll
  for (int j = 0; j < 4; ++j) any |= j < n && u[j] >= lo && u[j] != 0u;
  if (!any) return;
  const Philox4x32Counter r = GroupRandom(s, g);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (j < n && u[j] >= lo && u[j] != 0u) {
      const unsigned long long entry = RaceEntry(u[j], g * 4 + j, r.w[j]);
      best = entry > best ? entry : best;
    }
  }
}

// One token on its own (from the gather list): the same ticket as RaceGroup gives it.
__device__ __forceinline__ unsigned long long RaceOne(const RaceSeed& s, unsigned int u, int token) {
  const Philox4x32Counter r = GroupRandom(s, token >> 2);
  const int j = token & 3;  // selects, not r.w[j]: a dynamic index would put r in local memory
  const unsigned int word = j == 0 ? r.w[0] : (j == 1 ? r.w[1] : (j == 2 ? r.w[2] : r.w[3]));
  return RaceEntry(u, token, word);
}

}  // namespace sampling
}  // namespace kiln
