// Fused all-reduce + residual add + RMSNorm over rows of kHidden contiguous elements, one-shot
// style (every rank reads every region). kWorld ranks launch it with the same rows, vec,
// block and grid. Per row, in fp32 with one rounding per stored value:
//
//   x = T(sum over ranks j ascending of float(data_j[row]) + float(residual[row]))
//   residual[row] = x
//   output[row]   = T(float(x) * rsqrt(mean(float(x)^2) + eps) * float(weight))
//
// With copy_input the kernel first copies `input` (rows x kHidden, this rank's ordinary
// memory) into its own region; otherwise the data already sits there and `input` is ignored.
//
// Contract (the host checks it; the kernel trusts it): blockDim.x == kBlock; 1 <= gridDim.x
// <= min(kMaxBlocks, launch hint max_blocks), all blocks co-resident; rows, vec, grid and
// world equal on every rank; regions, input, residual, weight and output aligned to kVec
// elements (kVec divides kHidden); output may equal input; residual and weight overlap
// nothing else, and output overlaps no region.
//
// Partition: block b owns rows b, b + G, b + 2G, ... (G = gridDim.x); thread t owns vectors
// t, t + kBlock, ... of each row, which it holds in registers between the two passes
// (kHidden <= 16384 keeps that at most 32 registers at 512 threads). Block b copies, reads
// and writes only its rows, so, as for one-shot all_reduce (all_reduce.cuh): START makes
// every rank's copy of b's rows visible to b; after START regions are only read; END holds b
// until every peer b has finished reading this rank's region, so a finished kernel leaves no
// reader behind for the next stream-ordered writer of the region.
#pragma once

#include "kiln/comm/all_reduce.cuh"
#include "kiln/comm/comm_contract.h"
#include "kiln/comm/peer_barrier.cuh"
#include "kiln/comm/rank_sum.cuh"
#include "kiln/common/numeric.cuh"
#include "kiln/common/reduce.cuh"
#include "kiln/common/vec.cuh"

namespace kiln {
namespace comm {

template <typename T_, int kWorld_, int kHidden_, int kVec_, int kBlock_>
struct AllReduceAddRmsNormShape {
  using T = T_;
  static constexpr int kWorld = kWorld_;
  static constexpr int kHidden = kHidden_;
  static constexpr int kVec = kVec_;
  static constexpr int kBlock = kBlock_;
  static constexpr int kVecsPerRow = kHidden / kVec;
  static constexpr int kItemsPerThread = (kVecsPerRow + kBlock - 1) / kBlock;

  static_assert(kWorld >= 2 && kWorld <= kMaxWorld, "world size is 2..kMaxWorld");
  static_assert(kHidden >= 1 && kHidden <= 16384, "hidden is 1..16384");
  static_assert(kVec >= 1 && (kVec & (kVec - 1)) == 0, "vec must be a power of two");
  static_assert(kHidden % kVec == 0, "vec must divide hidden");
  static_assert(kVec * sizeof(T) <= 16, "a vector access is at most 16 bytes");
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "the block is whole warps, at most 1024");
  static_assert(kBlock >= kWorld, "the barrier takes one lane per rank");
};

namespace detail {

// Whether slot i of a thread (vector v of the row) lies inside the row: all slots but the
// last by construction, the last when the row divides evenly or v is small enough.
template <class S>
__device__ __forceinline__ bool InRow(int i, int v) {
  return i + 1 < S::kItemsPerThread || S::kVecsPerRow % S::kBlock == 0 || v < S::kVecsPerRow;
}

}  // namespace detail

template <class S>
__device__ __forceinline__ void AllReduceAddRmsNorm(const KilnCommPeers& peers, unsigned* epochs,
                                                    KilnCommControl* control, const typename S::T* input,
                                                    typename S::T* __restrict__ residual,
                                                    const typename S::T* __restrict__ weight, typename S::T* output,
                                                    long long rows, float eps, int rank, bool copy_input,
                                                    unsigned long long timeout_ns) {
  // input and output may be the same memory, so neither is __restrict__.
  using T = typename S::T;
  constexpr int kVec = S::kVec;
  constexpr int kHidden = S::kHidden;
  BlockBarrier<S::kWorld> barrier(peers, epochs, control, rank, timeout_ns);

  if (copy_input) {
    T* own = detail::Region<S::kWorld, T>(peers, rank);
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
      const long long base = row * kHidden;
#pragma unroll
      for (int i = 0; i < S::kItemsPerThread; ++i) {
        const int v = threadIdx.x + i * S::kBlock;
        if (detail::InRow<S>(i, v)) {
          StoreVec<kVec>(own + base + v * kVec, LoadVec<kVec>(input + base + v * kVec));
        }
      }
    }
  }
  if (!barrier.Arrive(kStartBarrier)) return;

  __shared__ float warp_sums[S::kBlock / 32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long base = row * kHidden;
    Vec<T, kVec> x[S::kItemsPerThread];
    float sum_of_squares = 0.0f;
#pragma unroll
    for (int i = 0; i < S::kItemsPerThread; ++i) {
      const int v = threadIdx.x + i * S::kBlock;
      if (detail::InRow<S>(i, v)) {
        float acc[kVec];
        SumOverRanks<S::kWorld, kVec, T>(peers, base + v * kVec, acc);
        const Vec<T, kVec> r = LoadVec<kVec>(residual + base + v * kVec);
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] += ToFloat(r.v[e]);
        x[i] = RoundToVec<T>(acc);
        StoreVec<kVec>(residual + base + v * kVec, x[i]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const float f = ToFloat(x[i].v[e]);
          sum_of_squares = fmaf(f, f, sum_of_squares);
        }
      }
    }
    const float inv_rms = rsqrtf(BlockSum<S::kBlock>(sum_of_squares, warp_sums) / static_cast<float>(kHidden) + eps);
#pragma unroll
    for (int i = 0; i < S::kItemsPerThread; ++i) {
      const int v = threadIdx.x + i * S::kBlock;
      if (detail::InRow<S>(i, v)) {
        const Vec<T, kVec> w = LoadVec<kVec>(weight + v * kVec);
        float y[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) y[e] = ToFloat(x[i].v[e]) * inv_rms * ToFloat(w.v[e]);
        StoreVec<kVec>(output + base + v * kVec, RoundToVec<T>(y));
      }
    }
    // Every warp reads warp_sums in BlockSum; the next row's BlockSum writes it again.
    __syncthreads();
  }

  if (!barrier.Arrive(kEndBarrier)) return;
  barrier.Finish();
}

}  // namespace comm
}  // namespace kiln
