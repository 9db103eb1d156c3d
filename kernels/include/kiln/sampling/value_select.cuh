// Exact thresholds of a row by radix selection on value bits (the bits of a non-negative float
// order like its value). A value's 31 bits are three digits, 11 + 11 + 9 from the top; a level's
// histogram counts, for one region (the values whose higher digits equal `prefix`), each digit's
// tokens and their probability mass. A block scan from the top bin down gives, for every bin,
// the count and mass of all tokens above it; the threshold lies in the lowest non-empty bin
// whose largest value is allowed, and the next level looks only inside that bin. After level 2
// a bin is one value: the threshold, exactly.
//
// A value v is allowed when the tokens strictly above it satisfy the criterion: fewer than k of
// them (top-k: v is at least the k-th largest value, so ties at the k-th value all stay), and
// their mass below `bound` (top-p: bound = p * mass of the candidate set). Both shrink as v
// grows, so the allowed values are those at or above one threshold.
//
// Masses are exact and deterministic: a bin holds one exponent, so it sums the 24-bit integer
// significands of its tokens (next to the count, one 64-bit shared add per token, or per
// run of equal bins in a thread: SharedAdd64); bins are scaled to fp64 and summed in a fixed order.
// Count and sum share the word: count in bits 63..44, sum in 43..0, exact for rows of at most
// 2^20 - 1 tokens (kMaxVocab).
#pragma once

#include "kiln/sampling/sampling_contract.h"  // kMaxVocab

namespace kiln {
namespace sampling {

constexpr int kHistBins = 2048;  // the widest level (11 bits)

struct Stats {
  unsigned int count;
  double mass;
};

__device__ __forceinline__ Stats operator+(Stats a, Stats b) { return {a.count + b.count, a.mass + b.mass}; }

struct Criterion {
  long long k;   // top-k: fewer than k tokens above; <= 0: no limit
  double bound;  // top-p: mass above < bound; kNoBound: no limit
};

// Above any mass a row can have (2^20 tokens of at most 2^129 each), so "no limit".
constexpr double kNoBound = 1e300;

__device__ __forceinline__ bool Allowed(const Stats& above, const Criterion& c) {
  return (c.k <= 0 || static_cast<long long>(above.count) < c.k) && above.mass < c.bound;
}

__device__ __forceinline__ int LevelShift(int level) { return level == 0 ? 20 : (level == 1 ? 9 : 0); }
__device__ __forceinline__ int LevelBits(int level) { return level == 2 ? 9 : 11; }
__device__ __forceinline__ int LevelBins(int level) { return 1 << LevelBits(level); }

// The region of (level, prefix): values whose bits above the level's digit equal prefix.
__device__ __forceinline__ unsigned int RegionLo(int level, unsigned int prefix) {
  return prefix << (LevelShift(level) + LevelBits(level));  // level 0: 0 (prefix is the sign)
}
__device__ __forceinline__ unsigned int RegionHi(int level, unsigned int prefix) {
  return RegionLo(level, prefix) + ((1u << (LevelShift(level) + LevelBits(level))) - 1u);
}
__device__ __forceinline__ bool InRegion(unsigned int u, int level, unsigned int prefix) {
  return (u >> (LevelShift(level) + LevelBits(level))) == prefix;
}
__device__ __forceinline__ int Digit(unsigned int u, int level) {
  return static_cast<int>((u >> LevelShift(level)) & ((1u << LevelBits(level)) - 1u));
}

// The histogram word of one token.
__device__ __forceinline__ unsigned long long HistEntry(unsigned int u) {
  const unsigned int exponent = u >> 23;
  const unsigned int significand = (u & 0x7fffffu) | (exponent != 0 ? 0x800000u : 0u);
  return (1ull << 44) | significand;
}

// Count and mass of a histogram word whose tokens share the exponent of `bits`.
__device__ __forceinline__ Stats BinStats(unsigned long long word, unsigned int bits) {
  const int exponent = static_cast<int>(bits >> 23);
  const unsigned long long sum = word & ((1ull << 44) - 1);
  return {static_cast<unsigned int>(word >> 44), ldexp(static_cast<double>(sum), (exponent != 0 ? exponent : 1) - 150)};
}

// word += v for a 64-bit word in shared memory, as two native 32-bit atomics. sm_90 has no
// 64-bit shared-memory atomic add: atomicAdd on a shared unsigned long long compiles to a
// compare-and-swap loop, which spins while the threads of a warp hit one bin (ncu on the H200,
// 2026-12-04: 139 instructions per token in top_k's histogram pass, MIO-bound). The low word's
// add returns the old value, so its wrap is known exactly and carried into the high word: once
// every add is done (readers come after a barrier) the word holds the exact 64-bit sum.
__device__ __forceinline__ void SharedAdd64(unsigned long long* word, unsigned long long v) {
  unsigned int* half = reinterpret_cast<unsigned int*>(word);  // little-endian: [0] low, [1] high
  const unsigned int lo = static_cast<unsigned int>(v);
  const unsigned int hi = static_cast<unsigned int>(v >> 32);
  const unsigned int old = atomicAdd(half, lo);
  const unsigned int carry = old + lo < old ? 1u : 0u;  // the low word wrapped
  if (hi + carry != 0u) atomicAdd(half + 1, hi + carry);
}

// Adds tokens to a shared histogram, merging runs of one bin in a thread into one atomic
// (rows where many tokens share a value, e.g. uniform rows, would otherwise serialize on one
// address).
struct HistogramRun {
  int bin = -1;
  unsigned long long sum = 0;

  __device__ __forceinline__ void Add(unsigned long long* hist, int b, unsigned long long entry) {
    if (b != bin) {
      Flush(hist);
      bin = b;
    }
    sum += entry;
  }
  __device__ __forceinline__ void Flush(unsigned long long* hist) {
    if (sum != 0) SharedAdd64(hist + bin, sum);
    sum = 0;
  }
};

// Shared scratch of the block-wide scan and choice.
template <int kThreads>
struct SelectScratch {
  unsigned int warp_count[kThreads / 32];
  double warp_mass[kThreads / 32];
  int chosen;
  int top;
  Stats chosen_above;
  Stats chosen_bin;
};

// What one thread holds after a scan: its two bins (2t, 2t+1), their own stats and the
// stats of everything above each, including `above` of the region.
struct BinScan {
  Stats own[2];
  Stats above[2];
  Stats total;  // the region's tokens plus `above`: the same in every thread
};

// A view of one level's histogram with optional adjustments (the second selection of
// top_k_top_p reuses the level-0 histogram): bins below floor_bin read as empty, bin
// override_bin reads as override_stats.
struct HistView {
  const unsigned long long* hist;
  int level;
  unsigned int prefix;
  int floor_bin = 0;
  int override_bin = -1;
  Stats override_stats = {0, 0.0};

  __device__ __forceinline__ Stats Bin(int b) const {
    if (b >= LevelBins(level) || b < floor_bin) return {0, 0.0};
    if (b == override_bin) return override_stats;
    return BinStats(hist[b], RegionLo(level, prefix) | (static_cast<unsigned int>(b) << LevelShift(level)));
  }
};

// Suffix sums over the bins of `view` (2 per thread, 1024 threads cover 2048 bins). Every
// thread must call it, after the histogram is complete; two barriers.
template <int kThreads>
__device__ __forceinline__ BinScan ScanBins(const HistView& view, Stats above, SelectScratch<kThreads>& s) {
  static_assert(kThreads * 2 == kHistBins, "two bins per thread");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  __syncthreads();  // the previous scan's readers of s are done
  BinScan scan;
  scan.own[0] = view.Bin(2 * threadIdx.x);
  scan.own[1] = view.Bin(2 * threadIdx.x + 1);
  const Stats mine = scan.own[0] + scan.own[1];

  // Inclusive suffix sums within the warp (lanes lane..31), then the exclusive ones.
  Stats inclusive = mine;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const unsigned int count = __shfl_down_sync(0xffffffffu, inclusive.count, offset);
    const double mass = __shfl_down_sync(0xffffffffu, inclusive.mass, offset);
    if (lane + offset < 32) {
      inclusive.count += count;
      inclusive.mass += mass;
    }
  }
  Stats exclusive;
  exclusive.count = __shfl_down_sync(0xffffffffu, inclusive.count, 1);
  exclusive.mass = __shfl_down_sync(0xffffffffu, inclusive.mass, 1);
  if (lane == 31) exclusive = {0, 0.0};

  if (lane == 0) {
    s.warp_count[warp] = inclusive.count;
    s.warp_mass[warp] = inclusive.mass;
  }
  __syncthreads();

  // Everything above this warp's bins, and the region's total, in one fixed order.
  Stats warps_above = above;
  Stats total = above;
#pragma unroll 4
  for (int w = kWarps - 1; w >= 0; --w) {
    const Stats t = {s.warp_count[w], s.warp_mass[w]};
    if (w > warp) warps_above = warps_above + t;
    total = total + t;
  }
  scan.above[1] = warps_above + exclusive;
  scan.above[0] = scan.above[1] + scan.own[1];
  scan.total = total;
  return scan;
}

constexpr int kNoBin = 0x7fffffff;

struct BinChoice {
  int bin;
  Stats above;  // every visible token above the bin
  Stats own;    // the bin's tokens
};

// The lowest non-empty bin whose largest value is allowed; when no bin is (a criterion that
// allows nothing, e.g. p * 0), the highest non-empty bin, so the row's largest value always
// stays. Every thread must call it, after ScanBins (one scan may serve several calls); three
// barriers.
template <int kThreads>
__device__ __forceinline__ BinChoice FindBin(const BinScan& scan, const Criterion& c, SelectScratch<kThreads>& s) {
  if (threadIdx.x == 0) {
    s.chosen = kNoBin;
    s.top = -1;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (scan.own[j].count == 0) continue;
    const int b = 2 * threadIdx.x + j;
    atomicMax(&s.top, b);
    if (Allowed(scan.above[j], c)) atomicMin(&s.chosen, b);
  }
  __syncthreads();
  const int b = s.chosen != kNoBin ? s.chosen : s.top;
  if (b >= 0 && b / 2 == static_cast<int>(threadIdx.x)) {
    s.chosen_above = (b & 1) ? scan.above[1] : scan.above[0];  // no dynamic index: registers
    s.chosen_bin = (b & 1) ? scan.own[1] : scan.own[0];
  }
  __syncthreads();
  return {b, s.chosen_above, s.chosen_bin};
}

}  // namespace sampling
}  // namespace kiln
