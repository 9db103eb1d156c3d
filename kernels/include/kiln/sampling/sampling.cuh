// The sampling ops over probs [rows, vocab] fp32 (row-major, rows `row_stride` floats apart),
// one block of kThreads per row, one token index per row out:
//
//   top_k         sample from the tokens whose value is at least the k-th largest value
//   top_p         ... whose value v has (mass of the tokens > v) < p * (row mass)
//   top_k_top_p   top-k, then top-p over what is left: (mass > v) < p * (mass of the top-k set)
//   min_p         ... whose value is >= fp32(min_p * max value)
//   argmax        the largest value; ties (and NaN, as torch) to the lowest index
//
// "Sample" is the exponential race of kiln/sampling/race.cuh over the allowed tokens, so rows
// need not be normalized (any non-negative values; a zero is never drawn; negatives and NaN
// read as 0). Ties at a threshold are all in: top_k may keep more than k tokens. The allowed
// set is exact: the thresholds come from kiln/sampling/value_select.cuh, on bits, with exact
// integer masses. A row with no positive value gives token 0.
//
// Per-row parameters come from k_values[row] / p_values[row] when those are not null, else
// from the scalars. k <= 0 or k >= vocab: no top-k. p >= 1: no top-p; p <= 0 or NaN keeps
// only the largest value's tokens. min_p is clamped to [0, 1] (NaN: 0).
//
// Passes over the row (each a read of 4 * vocab bytes; they alternate direction for L2 reuse):
//   argmax 1; min_p 2 (max, race); top_k/top_p with no limit in effect 1 (race);
//   top_k, top_p, top_k_top_p: 2 when the tokens of the threshold's level-0 bin (an 11-bit
//   value prefix: one exponent and 3 significand bits, values within 12.5%) fit the gather
//   list, else up to 4 (top_k_top_p up to 8).
// Philox runs only for tokens that take part in the race.
#pragma once

#include "kiln/common/cluster.cuh"
#include "kiln/sampling/race.cuh"
#include "kiln/sampling/row_pass.cuh"
#include "kiln/sampling/value_select.cuh"

namespace kiln {
namespace sampling {

enum class SamplingOp { kTopK, kTopP, kTopKTopP, kMinP, kArgmax };

// kCluster blocks (a thread-block cluster, sm_90+) share one row; 1: a block per row.
template <typename Out_, int kVec_, int kThreads_, int kCluster_ = 1>
struct SamplingShape {
  using Out = Out_;  // int or long long
  static constexpr int kVec = kVec_;
  static constexpr int kThreads = kThreads_;
  static constexpr int kCluster = kCluster_;
  static_assert(sizeof(Out) == 4 || sizeof(Out) == 8, "samples are int32 or int64");
  static_assert(kVec == 1 || kVec == 2 || kVec == 4, "vec is 1, 2 or 4 floats (at most 16 bytes)");
  static_assert(kThreads == 1024, "the value histograms take two bins per thread of 1024");
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4 || kCluster == 8, "cluster is 1, 2, 4 or 8 blocks");
};

// Tokens of the region around a threshold kept in shared memory, so the finer levels and the
// race among them need no further pass over the row.
constexpr int kListCapacity = 4096;
// Tokens that race in a gather pass, queued so that the race runs on dense warps after it.
constexpr int kRaceQueueCapacity = 8192;

// Dynamic shared memory of top_k / top_p / top_k_top_p (96 KiB: the launch hint).
struct SelectSmem {
  unsigned long long hist0[kHistBins];  // level 0 of the row, kept for top_k_top_p's 2nd selection
  unsigned long long hist1[kHistBins];  // levels 1 and 2
  unsigned int list_bits[kListCapacity];
  int list_token[kListCapacity];
  int race_token[kRaceQueueCapacity];
};
static_assert(sizeof(SelectSmem) == kSelectSmemBytes, "SelectSmem is the dynamic shared memory of the contract");

// ... of a row shared by a cluster: each block's own histogram of its part of the row, which
// the cluster's blocks sum into their hist0 / hist1 (the same sums in every block).
struct ClusterSelectSmem {
  SelectSmem select;
  unsigned long long hist_part[kHistBins];
};
static_assert(sizeof(ClusterSelectSmem) == kClusterSelectSmemBytes, "ClusterSelectSmem: the contract's size");

template <int kThreads>
struct BlockScratch {
  SelectScratch<kThreads> select;
  unsigned long long warp_best[kThreads / 32];
  unsigned long long block_best;  // the block's part of a cluster-wide maximum
  unsigned int list_count;
  unsigned int race_count;        // tokens queued for the race (may pass kRaceQueueCapacity)
  unsigned int list_lo, list_hi;  // the list holds every token with bits in [lo, hi]
  bool list_raced_above;          // and the allowed tokens above hi have been raced
};

// The largest value over the block, in every thread.
template <int kThreads>
__device__ __forceinline__ unsigned long long BlockMax(unsigned long long v, unsigned long long* warp_best) {
  __syncthreads();  // earlier readers of warp_best are done
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0;
#pragma unroll 8
  for (int w = 0; w < kThreads / 32; ++w) v = warp_best[w] > v ? warp_best[w] : v;
  return v;
}

// A slot of a shared counter for each thread that calls it now: one atomic per warp (the
// lanes that arrive together), not one per thread, where many threads of a warp push.
__device__ __forceinline__ unsigned int WarpAggregatedSlot(unsigned int* counter) {
  const unsigned int mask = __activemask();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int leader = __ffs(mask) - 1;
  unsigned int base = 0;
  if (lane == leader) base = atomicAdd(counter, static_cast<unsigned int>(__popc(mask)));
  base = __shfl_sync(mask, base, leader);
  return base + static_cast<unsigned int>(__popc(mask & ((1u << lane) - 1u)));
}

// Where a selection stands: the next histogram is of region (level, prefix), over the tokens
// at or above `floor`; `above` counts the visible tokens above the region.
struct SelectState {
  int level;
  unsigned int prefix;
  Stats above;
  unsigned int floor;
};

// The end of a selection: the threshold's bits, the visible tokens above it and those at it.
struct Threshold {
  unsigned int bits;
  Stats above;
  Stats at;
};

// One row's selection and race. Every thread of the block runs every method (they contain
// barriers); all decisions are on values every thread holds alike. With Shape::kCluster > 1
// the blocks of a cluster share the row: each walks its part (ForEachGroup's ranks) and keeps
// its own list and race queue; histograms and maxima are summed / taken over the cluster, so
// every block holds the same histograms and takes the same decisions, and the winner is the
// same as one block's.
template <class Shape>
class RowSampler {
 public:
  static constexpr int kThreads = Shape::kThreads;
  static constexpr int kCluster = Shape::kCluster;

  // hist_part: the block's own histogram (ClusterSelectSmem::hist_part) when kCluster > 1.
  __device__ RowSampler(const float* row, int vocab, RaceSeed seed, SelectSmem* smem, BlockScratch<kThreads>& s,
                        unsigned long long* hist_part = nullptr)
      : row_(row), vocab_(vocab), seed_(seed), smem_(smem), s_(s), hist_part_(hist_part) {
    if constexpr (kCluster > 1) rank_ = static_cast<int>(ClusterRank());
    if (threadIdx.x == 0) {
      s_.list_count = 0;
      s_.list_lo = 1;  // empty
      s_.list_hi = 0;
      s_.list_raced_above = false;
    }
    __syncthreads();
  }

  // The histogram of region (level, prefix) over tokens >= floor, from a pass over the row.
  __device__ void PassHistogram(unsigned long long* hist, int level, unsigned int prefix, unsigned int floor) {
    unsigned long long* part = PartOf(hist);
    ClearHistogram(part);
    HistogramRun run;
    Walk<true>(reverse_, [&](int, const unsigned int(&u)[4], int n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (j < n && u[j] >= floor && InRegion(u[j], level, prefix)) run.Add(part, Digit(u[j], level), HistEntry(u[j]));
      }
    });
    run.Flush(part);
    reverse_ = !reverse_;
    SumOverCluster(hist, level);
  }

  // A pass that puts every token with bits in [lo, hi] on the list (the caller knows they
  // fit) and, with race_above, races the tokens above hi (the caller knows they are allowed).
  // The tokens that race are queued and raced after the pass, a token per thread: raced
  // inline, a warp would run Philox whenever one of its 32 groups races, which for a top-p
  // set of a few thousand tokens is almost every step of the pass (2026-12-04, H200).
  __device__ void PassGather(unsigned int lo, unsigned int hi, bool race_above) {
    __syncthreads();  // earlier readers of the list are done
    if (threadIdx.x == 0) {
      s_.list_count = 0;
      s_.race_count = 0;
      s_.list_lo = lo;
      s_.list_hi = hi;
      s_.list_raced_above = race_above;
    }
    __syncthreads();
    unsigned int* list_bits = smem_->list_bits;
    int* list_token = smem_->list_token;
    int* race_token = smem_->race_token;
    const unsigned int race_lo = hi + 1u;
    Walk<true>(reverse_, [&](int g, const unsigned int(&u)[4], int n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (j < n && u[j] >= lo && u[j] <= hi) {
          const unsigned int slot = atomicAdd(&s_.list_count, 1u);
          list_bits[slot] = u[j];
          list_token[slot] = g * kGroupTokens + j;
        }
        if (race_above && j < n && u[j] >= race_lo) {  // race_lo > 0: a zero never races
          const unsigned int slot = WarpAggregatedSlot(&s_.race_count);
          if (slot < kRaceQueueCapacity) race_token[slot] = g * kGroupTokens + j;
        }
      }
    });
    reverse_ = !reverse_;
    __syncthreads();
    if (race_above) RaceQueued(race_lo);
  }

  // Races the tokens PassGather queued; when more raced than the queue holds, a pass races
  // every token >= lo (the queued ones again: a second ticket of a token is the same ticket).
  __device__ void RaceQueued(unsigned int lo) {
    const unsigned int raced = s_.race_count;
    const int queued = static_cast<int>(min(raced, static_cast<unsigned int>(kRaceQueueCapacity)));
    for (int i = threadIdx.x; i < queued; i += kThreads) {
      const int token = smem_->race_token[i];
      const unsigned long long entry = RaceOne(seed_, SanitizedBits(__ldg(row_ + token)), token);  // from L1 / L2
      best_ = entry > best_ ? entry : best_;
    }
    if (raced > static_cast<unsigned int>(kRaceQueueCapacity)) PassRace(lo);
  }

  // A pass that races every token >= lo.
  __device__ void PassRace(unsigned int lo) {
    unsigned long long best = best_;
    const RaceSeed seed = seed_;
    Walk<true>(reverse_, [&](int g, const unsigned int(&u)[4], int n) { RaceGroup(seed, g, u, n, lo, best); });
    best_ = best;
    reverse_ = !reverse_;
  }

  // The largest sanitized value of the row (one pass).
  __device__ unsigned int PassMaxBits() {
    unsigned int m = 0;
    Walk<true>(reverse_, [&](int, const unsigned int(&u)[4], int n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) m = j < n && u[j] > m ? u[j] : m;
    });
    reverse_ = !reverse_;
    return static_cast<unsigned int>(RowMax(m));
  }

  // The index of the largest raw value, ties and NaN as torch.argmax (one pass).
  __device__ int PassArgmax() {
    unsigned long long best = 0;
    Walk<false>(false, [&](int g, const unsigned int(&u)[4], int n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (j >= n) continue;
        const bool nan = (u[j] & 0x7fffffffu) > 0x7f800000u;
        const unsigned int key = nan ? 0xffffffffu : OrderedBits(__uint_as_float(u[j]));
        const unsigned long long entry = (static_cast<unsigned long long>(key) << 32) |
                                         static_cast<unsigned int>(~(g * kGroupTokens + j));
        best = entry > best ? entry : best;
      }
    });
    return RaceWinner(RowMax(best));
  }

  // The level-0 histogram of the whole row into hist0, and its scan.
  __device__ BinScan Level0() {
    PassHistogram(smem_->hist0, 0, 0, 0);
    return ScanBins<kThreads>(HistView{smem_->hist0, 0, 0}, {0, 0.0}, s_.select);
  }

  __device__ BinChoice Find(const BinScan& scan, const Criterion& c) { return FindBin<kThreads>(scan, c, s_.select); }

  __device__ SelectScratch<kThreads>& scratch() { return s_.select; }

  // Moves `st` into the chosen bin's region, one level down. When the list does not hold
  // that region and its visible tokens fit, a pass gathers them (racing above with race_above).
  __device__ void Advance(SelectState& st, const BinChoice& choice, bool race_above) {
    st.above = choice.above;
    st.prefix = (st.prefix << LevelBits(st.level)) | static_cast<unsigned int>(choice.bin);
    st.level += 1;
    if (!ListCovers(st) && choice.own.count <= kListCapacity) {
      const unsigned int lo = RegionLo(st.level, st.prefix);
      PassGather(lo > st.floor ? lo : st.floor, RegionHi(st.level, st.prefix), race_above);
    }
  }

  // Finishes a selection from `st` (level 1 or 2): the exact threshold.
  __device__ Threshold Refine(SelectState st, const Criterion& c, bool race_above) {
    for (;;) {
      unsigned long long* hist = smem_->hist1;
      if (ListCovers(st)) {
        HistogramFromList(hist, st.level, st.prefix, st.floor);
      } else {
        PassHistogram(hist, st.level, st.prefix, st.floor);
      }
      const BinScan scan = ScanBins<kThreads>(HistView{hist, st.level, st.prefix}, st.above, s_.select);
      const BinChoice choice = Find(scan, c);
      if (st.level == 2)
        return {RegionLo(2, st.prefix) | static_cast<unsigned int>(choice.bin), choice.above, choice.own};
      Advance(st, choice, race_above);
    }
  }

  // Races the tokens >= t not raced yet and returns the winner (0 when none is positive).
  __device__ int FinishRace(unsigned int t) {
    if (s_.list_raced_above && s_.list_lo <= t && t <= s_.list_hi) {
      const int count = static_cast<int>(s_.list_count);
      for (int i = threadIdx.x; i < count; i += kThreads) {
        const unsigned int u = smem_->list_bits[i];
        if (u >= t && u != 0u) {
          const unsigned long long entry = RaceOne(seed_, u, smem_->list_token[i]);
          best_ = entry > best_ ? entry : best_;
        }
      }
    } else {
      PassRace(t);
    }
    const unsigned long long best = RowMax(best_);
    return best != 0 ? RaceWinner(best) : 0;
  }

  __device__ bool ListCovers(const SelectState& st) const {
    const unsigned int lo = RegionLo(st.level, st.prefix);
    return s_.list_lo <= (lo > st.floor ? lo : st.floor) && RegionHi(st.level, st.prefix) <= s_.list_hi;
  }

 private:
  __device__ void ClearHistogram(unsigned long long* hist) {
    __syncthreads();  // earlier readers of hist are done
    for (int i = threadIdx.x; i < kHistBins; i += kThreads) hist[i] = 0;
    __syncthreads();
  }

  __device__ void HistogramFromList(unsigned long long* hist, int level, unsigned int prefix, unsigned int floor) {
    unsigned long long* part = PartOf(hist);
    ClearHistogram(part);
    const int count = static_cast<int>(s_.list_count);
    for (int i = threadIdx.x; i < count; i += kThreads) {
      const unsigned int u = smem_->list_bits[i];
      if (u >= floor && InRegion(u, level, prefix)) SharedAdd64(part + Digit(u, level), HistEntry(u));
    }
    SumOverCluster(hist, level);
  }

  // Calls f(g, u, n) for every group of this block's part of the row (row_pass.cuh).
  template <bool kSanitize, class F>
  __device__ __forceinline__ void Walk(bool reverse, F&& f) {
    ForEachGroup<kThreads, Shape::kVec, kSanitize, kCluster>(row_, vocab_, reverse, f, rank_);
  }

  // Where a block counts its part of a histogram: hist itself for a block per row.
  __device__ unsigned long long* PartOf(unsigned long long* hist) const {
    if constexpr (kCluster > 1) {
      return hist_part_;
    } else {
      return hist;
    }
  }

  // After every thread's adds to PartOf(hist): hist complete in every block of the cluster
  // (the sum of the blocks' parts; exact integer sums, so the order does not matter). One
  // block: a barrier. A cluster: two cluster barriers, the first so that every part is
  // complete, the second so that no block clears its part while another still reads it.
  __device__ void SumOverCluster(unsigned long long* hist, int level) {
    if constexpr (kCluster > 1) {
      ClusterSync();
      const int bins = LevelBins(level);
      for (int b = threadIdx.x; b < bins; b += kThreads) {
        unsigned long long sum = 0;
#pragma unroll
        for (int r = 0; r < kCluster; ++r) sum += ClusterLoadU64(ClusterAddress(hist_part_ + b, r));
        hist[b] = sum;
      }
      ClusterSync();
    } else {
      __syncthreads();
    }
  }

  // The largest v over the row's blocks, in every thread.
  __device__ unsigned long long RowMax(unsigned long long v) {
    v = BlockMax<kThreads>(v, s_.warp_best);
    if constexpr (kCluster > 1) {
      if (threadIdx.x == 0) s_.block_best = v;
      ClusterSync();
#pragma unroll
      for (int r = 0; r < kCluster; ++r) {
        const unsigned long long other = ClusterLoadU64(ClusterAddress(&s_.block_best, r));
        v = other > v ? other : v;
      }
      ClusterSync();  // every block has read block_best before it is written again
    }
    return v;
  }

  const float* row_;
  int vocab_;
  RaceSeed seed_;
  SelectSmem* smem_;
  BlockScratch<kThreads>& s_;
  unsigned long long* hist_part_;
  int rank_ = 0;
  bool reverse_ = false;
  unsigned long long best_ = 0;  // this thread's race so far
};

// top_k, top_p (one criterion): level 0 from a pass, then down to the exact threshold.
template <class Shape>
__device__ __forceinline__ unsigned int SelectOne(RowSampler<Shape>& r, const Criterion& given, bool top_p, double p) {
  const BinScan scan = r.Level0();
  Criterion c = given;
  if (top_p) c.bound = p * scan.total.mass;
  SelectState st = {0, 0u, {0, 0.0}, 0u};
  r.Advance(st, r.Find(scan, c), true);
  return r.Refine(st, c, true).bits;
}

// top_k_top_p: the k-th value t_k exactly, the mass M_k of the tokens >= t_k, then the top-p
// threshold over those with bound p * M_k. Tokens in level-0 bins above g_hi are allowed
// whatever t_k is (their mass above is below p times a lower bound of M_k), so when the bins
// from t_k's up to g_hi fit the list, one gather pass serves both selections.
template <class Shape>
__device__ __forceinline__ unsigned int SelectTopKTopP(RowSampler<Shape>& r, SelectSmem* smem, long long k, double p) {
  const BinScan scan = r.Level0();
  const BinChoice at_k = r.Find(scan, {k, kNoBound});
  const BinChoice at_p_low = r.Find(scan, {0, p * at_k.above.mass});
  const int g_hi = at_p_low.bin > at_k.bin ? at_p_low.bin : at_k.bin;
  const Stats& above_g_hi = g_hi == at_k.bin ? at_k.above : at_p_low.above;
  const unsigned int span = at_k.above.count + at_k.own.count - above_g_hi.count;
  if (span <= kListCapacity) {
    r.PassGather(static_cast<unsigned int>(at_k.bin) << 20, (static_cast<unsigned int>(g_hi + 1) << 20) - 1u, true);
  }

  SelectState st1 = {0, 0u, {0, 0.0}, 0u};
  r.Advance(st1, at_k, false);  // its gather (fallback) must not race: the top-p cut is unknown
  const Threshold t_k = r.Refine(st1, {k, kNoBound}, false);
  const double mass_k = t_k.above.mass + t_k.at.mass;

  // Level 0 again from hist0: nothing below t_k's bin, and that bin only its tokens >= t_k.
  HistView view{smem->hist0, 0, 0u};
  view.floor_bin = at_k.bin;
  view.override_bin = at_k.bin;
  view.override_stats = {t_k.above.count - at_k.above.count + t_k.at.count,
                         (t_k.above.mass - at_k.above.mass) + t_k.at.mass};
  const BinScan scan2 = ScanBins<Shape::kThreads>(view, {0, 0.0}, r.scratch());
  const Criterion c2 = {0, p * mass_k};
  SelectState st2 = {0, 0u, {0, 0.0}, t_k.bits};
  r.Advance(st2, r.Find(scan2, c2), true);
  return r.Refine(st2, c2, true).bits;
}

// One row: the op's allowed set, the race, samples[row].
template <class Shape, SamplingOp kOp>
__device__ __forceinline__ void SampleRow(void* samples, const float* probs, long long vocab, long long row_stride,
                                          const int* k_values, long long k_scalar, const float* p_values,
                                          double p_scalar, unsigned long long seed, unsigned long long offset,
                                          SelectSmem* smem, BlockScratch<Shape::kThreads>& scratch,
                                          unsigned long long* hist_part) {
  const long long row = blockIdx.x / Shape::kCluster;  // a cluster's blocks are consecutive in x
  const int v = static_cast<int>(vocab);
  const RaceSeed race_seed = {static_cast<unsigned int>(seed), static_cast<unsigned int>(seed >> 32),
                              static_cast<unsigned int>(row), static_cast<unsigned int>(offset),
                              static_cast<unsigned int>(offset >> 32)};
  RowSampler<Shape> r(probs + row * row_stride, v, race_seed, smem, scratch, hist_part);
  int token = 0;
  if constexpr (kOp == SamplingOp::kArgmax) {
    token = r.PassArgmax();
  } else if constexpr (kOp == SamplingOp::kMinP) {
    float min_p = p_values != nullptr ? p_values[row] : static_cast<float>(p_scalar);
    min_p = fminf(fmaxf(min_p, 0.0f), 1.0f);  // NaN: 0
    const float threshold = min_p * __uint_as_float(r.PassMaxBits());
    token = r.FinishRace(__float_as_uint(threshold));
  } else {
    constexpr bool kUsesK = kOp == SamplingOp::kTopK || kOp == SamplingOp::kTopKTopP;
    constexpr bool kUsesP = kOp == SamplingOp::kTopP || kOp == SamplingOp::kTopKTopP;
    const long long k = kUsesK ? (k_values != nullptr ? k_values[row] : k_scalar) : 0;
    const double p = kUsesP ? (p_values != nullptr ? static_cast<double>(p_values[row]) : p_scalar) : 1.0;
    const bool k_on = kUsesK && k > 0 && k < vocab;
    const bool p_on = kUsesP && !(p >= 1.0);
    unsigned int threshold = 0;  // no limit: every positive token races
    if (k_on && p_on) {
      threshold = SelectTopKTopP(r, smem, k, p);
    } else if (k_on) {
      threshold = SelectOne(r, {k, kNoBound}, false, 1.0);
    } else if (p_on) {
      threshold = SelectOne(r, {0, kNoBound}, true, p);
    }
    token = r.FinishRace(threshold);
  }
  if (threadIdx.x == 0 && blockIdx.x % Shape::kCluster == 0)
    static_cast<typename Shape::Out*>(samples)[row] = static_cast<typename Shape::Out>(token);
}

}  // namespace sampling
}  // namespace kiln
