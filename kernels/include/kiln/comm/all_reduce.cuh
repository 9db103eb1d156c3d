// Single-node all-reduce (sum) over peer-mapped (NVLink P2P) data regions, one-shot and
// two-shot. kWorld ranks each launch the same kernel with the same n, vec, block and grid.
//
//   output[i] = T(float(data_0[i]) + float(data_1[i]) + ... + float(data_{W-1}[i])),  i < n
//
// fp32 accumulation in ascending rank order and one rounding, so every rank gets the same
// bits. With copy_input the kernel first copies `input` (this rank's ordinary memory) into
// its own region; otherwise the data already sits there and `input` is ignored.
//
// Contract (the host checks it; the kernel trusts it):
//  - blockDim.x == kBlock; 1 <= gridDim.x <= min(kMaxBlocks, launch hint max_blocks); all
//    blocks co-resident (the barrier waits for same-index blocks of other ranks);
//  - n, vec, grid, world and the kernel (one- or two-shot) are the same on every rank;
//  - every data region, `input` (with copy_input) and `output` are aligned to kVec elements,
//    each region holds n elements; `output` overlaps no region; output may equal input.
//
// Partition. Whole vectors v in [0, nvec), nvec = n / kVec, are dealt to threads grid-stride:
// within a range, offset o goes to block o / kBlock % G. The last n % kVec elements (the
// tail) belong to block 0, thread t taking element nvec * kVec + t, in both kernels.
//  - one-shot: one range, [0, nvec);
//  - two-shot: W ranges, chunk c = [c * per, min((c + 1) * per, nvec)), per = ceil(nvec / W);
//    offsets are counted from each chunk's start.
// The partition depends only on (n, kVec, W, G, kBlock), the same on every rank, so block b
// owns the same elements on every rank, and one thread copies, reduces and writes each.
//
// Why per-block barriers suffice (block b of rank r; "peer" = block b of another rank):
//  - copy: b writes into its own region only elements it owns, which only blocks b (of any
//    rank) read in this call. START: every peer has written its copies of the elements b
//    reads before b reads them (release after __syncthreads, acquire before __syncthreads).
//  - one-shot: after START every access of a region is a read; END holds b until every peer
//    has finished reading; b's writes go to `output`, private to rank r.
//  - two-shot phase 1: b reduces its part of chunk r from every region and writes it back
//    into its own region's chunk r. Before MID, only b itself reads those elements (rank j
//    reduces chunk j), so the in-place write races with nobody. MID: every peer c has
//    written its part of chunk c before b copies it in phase 2 (same offsets, same block).
//    The tail is reduced after START and never written back into a region.
//  - END: b leaves only when every peer b has finished reading rank r's region. So when the
//    whole kernel of rank r has finished (every b passed END), no peer still reads its
//    region, and the next stream-ordered writer of that region (the next call's copy, or
//    the host) cannot overwrite data in use, whatever partition the next call has.
#pragma once

#include "kiln/comm/comm_abi.cuh"
#include "kiln/comm/peer_barrier.cuh"
#include "kiln/comm/peer_load.cuh"
#include "kiln/comm/rank_sum.cuh"
#include "kiln/common/vec.cuh"

namespace kiln {
namespace comm {

template <typename T_, int kWorld_, int kVec_, int kBlock_>
struct AllReduceShape {
  using T = T_;
  static constexpr int kWorld = kWorld_;
  static constexpr int kVec = kVec_;
  static constexpr int kBlock = kBlock_;

  static_assert(kWorld >= 2 && kWorld <= kMaxWorld, "world size is 2..kMaxWorld");
  static_assert(kVec >= 1 && (kVec & (kVec - 1)) == 0, "vec must be a power of two");
  static_assert(kVec * sizeof(T) <= 16, "a vector access is at most 16 bytes");
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "the block is whole warps, at most 1024");
  static_assert(kBlock >= kWorld, "the barrier takes one lane per rank");
};

namespace detail {

// Rank `rank`'s region of this call, rank known at run time.
template <int kWorld, typename T>
__device__ __forceinline__ T* Region(const KilnCommPeers& peers, int rank) {
  return static_cast<T*>(PickRank<kWorld>(peers.data, rank));
}

// The first vector offset of this thread in a range, and the grid-wide stride.
template <int kBlock>
__device__ __forceinline__ long long FirstOffset() {
  return static_cast<long long>(blockIdx.x) * kBlock + threadIdx.x;
}
template <int kBlock>
__device__ __forceinline__ long long GridStride() {
  return static_cast<long long>(gridDim.x) * kBlock;
}

// Two-shot chunk c: vectors [begin, end).
struct Chunk {
  long long begin;
  long long end;
};
__device__ __forceinline__ Chunk ChunkOf(int c, long long per, long long nvec) {
  const long long begin = min(static_cast<long long>(c) * per, nvec);
  return {begin, min(begin + per, nvec)};
}

// Copy the vectors [begin, end) this thread owns from input into this rank's region.
template <class S>
__device__ __forceinline__ void CopyOwned(typename S::T* own, const typename S::T* input, long long begin,
                                          long long end) {
  for (long long v = begin + FirstOffset<S::kBlock>(); v < end; v += GridStride<S::kBlock>()) {
    StoreVec<S::kVec>(own + v * S::kVec, LoadVec<S::kVec>(input + v * S::kVec));
  }
}

// The tail (the last n % kVec elements): block 0, one element per thread.
template <class S>
__device__ __forceinline__ bool OwnsTailElement(long long n) {
  return blockIdx.x == 0 && threadIdx.x < n % S::kVec;
}

}  // namespace detail

template <class S>
__device__ __forceinline__ void AllReduceOneShot(const KilnCommPeers& peers, unsigned* epochs,
                                                 KilnCommControl* control, const typename S::T* input,
                                                 typename S::T* output, long long n, int rank,
                                                 bool copy_input, unsigned long long timeout_ns) {
  // input and output may be the same memory, so neither is __restrict__.
  using T = typename S::T;
  constexpr int kVec = S::kVec;
  BlockBarrier<S::kWorld> barrier(peers, epochs, control, rank, timeout_ns);
  const long long nvec = n / kVec;
  const long long tail_element = nvec * kVec + threadIdx.x;

  if (copy_input) {
    T* own = detail::Region<S::kWorld, T>(peers, rank);
    detail::CopyOwned<S>(own, input, 0, nvec);
    if (detail::OwnsTailElement<S>(n)) own[tail_element] = input[tail_element];
  }
  if (!barrier.Arrive(kStartBarrier)) return;

  for (long long v = detail::FirstOffset<S::kBlock>(); v < nvec; v += detail::GridStride<S::kBlock>()) {
    StoreVec<kVec>(output + v * kVec, ReduceOverRanks<S::kWorld, kVec, T>(peers, v * kVec));
  }
  if (detail::OwnsTailElement<S>(n)) {
    output[tail_element] = ReduceOverRanks<S::kWorld, 1, T>(peers, tail_element).v[0];
  }

  if (!barrier.Arrive(kEndBarrier)) return;
  barrier.Finish();
}

template <class S>
__device__ __forceinline__ void AllReduceTwoShot(const KilnCommPeers& peers, unsigned* epochs,
                                                 KilnCommControl* control, const typename S::T* input,
                                                 typename S::T* output, long long n, int rank,
                                                 bool copy_input, unsigned long long timeout_ns) {
  using T = typename S::T;
  constexpr int kVec = S::kVec;
  constexpr int kWorld = S::kWorld;
  BlockBarrier<kWorld> barrier(peers, epochs, control, rank, timeout_ns);
  const long long nvec = n / kVec;
  const long long per = (nvec + kWorld - 1) / kWorld;
  const long long tail_element = nvec * kVec + threadIdx.x;
  T* own = detail::Region<kWorld, T>(peers, rank);

  if (copy_input) {
    // Every chunk: peer c reads this rank's chunk c in phase 1.
#pragma unroll
    for (int c = 0; c < kWorld; ++c) {
      const detail::Chunk chunk = detail::ChunkOf(c, per, nvec);
      detail::CopyOwned<S>(own, input, chunk.begin, chunk.end);
    }
    if (detail::OwnsTailElement<S>(n)) own[tail_element] = input[tail_element];
  }
  if (!barrier.Arrive(kStartBarrier)) return;

  // Phase 1: reduce chunk `rank` into this rank's region (in place) and into output.
  const detail::Chunk mine = detail::ChunkOf(rank, per, nvec);
  for (long long v = mine.begin + detail::FirstOffset<S::kBlock>(); v < mine.end;
       v += detail::GridStride<S::kBlock>()) {
    const Vec<T, kVec> sum = ReduceOverRanks<kWorld, kVec, T>(peers, v * kVec);
    StoreVec<kVec>(own + v * kVec, sum);
    StoreVec<kVec>(output + v * kVec, sum);
  }
  if (detail::OwnsTailElement<S>(n)) {
    output[tail_element] = ReduceOverRanks<kWorld, 1, T>(peers, tail_element).v[0];
  }
  if (!barrier.Arrive(kMidBarrier)) return;

  // Phase 2: every other chunk c, already reduced by rank c, from rank c's region.
#pragma unroll
  for (int c = 0; c < kWorld; ++c) {
    if (c == rank) continue;
    const T* region = static_cast<const T*>(peers.data[c]);
    const detail::Chunk chunk = detail::ChunkOf(c, per, nvec);
    for (long long v = chunk.begin + detail::FirstOffset<S::kBlock>(); v < chunk.end;
         v += detail::GridStride<S::kBlock>()) {
      StoreVec<kVec>(output + v * kVec, LoadPeerVec<kVec>(region + v * kVec));
    }
  }

  if (!barrier.Arrive(kEndBarrier)) return;
  barrier.Finish();
}

}  // namespace comm
}  // namespace kiln
