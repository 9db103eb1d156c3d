// Single-node all-reduce (sum) over peer-mapped (NVLink P2P) data regions, one-shot and
// two-shot, each in two modes. kWorld ranks each launch the same kernel with the same n, vec,
// block, grid and copy_input.
//
//   output[i] = T(x_0[i] + x_1[i] + ... + x_{W-1}[i])  in fp32, i < n
//
// fp32 accumulation in ascending rank order and one rounding, so every rank gets the same
// bits.
//
// Modes:
//  - push (copy_input != 0): x_r is `input`, this rank's ordinary memory. Each rank's region
//    holds kWorld slots of stride = n rounded up to whole vectors; slot j of rank p's region
//    receives what rank j sends to p. Ranks write their input into the peers' slots with
//    remote stores (posted over NVLink, no round trip, and no local staging copy), then
//    read what arrived from their own memory. (A first version copied the input into the
//    own region and pulled the peers' regions: on two H200s it topped out at 232 GB/s bus
//    bandwidth at 256 MiB; pushing two-shot reaches 290, see docs/comm.md.)
//  - pull (copy_input == 0): x_j is rank j's region itself (a registered buffer the caller
//    filled): ranks read each other's regions. Two-shot then overwrites chunk r of rank r's
//    region with the reduced values.
//
// Contract (the host checks it; the kernel trusts it):
//  - blockDim.x == kBlock; 1 <= gridDim.x <= min(kMaxBlocks, launch hint max_blocks); all
//    blocks co-resident (the barrier waits for same-index blocks of other ranks);
//  - n, vec, grid, world, copy_input and the kernel are the same on every rank;
//  - every region, `input` and `output` are aligned to kVec elements; a region holds kWorld
//    slots (push) or n elements (pull); `output` overlaps no region; output may equal input.
//
// Partition. Whole vectors v in [0, nvec), nvec = n / kVec, are dealt to threads grid-stride:
// within a range, offset o goes to block o / kBlock % G. The last n % kVec elements (the
// tail) belong to block 0, thread t taking element nvec * kVec + t, and always go one-shot.
//  - one-shot: one range, [0, nvec);
//  - two-shot: W ranges, chunk c = [c * per, min((c + 1) * per, nvec)), per = ceil(nvec / W);
//    offsets are counted from each chunk's start.
// The partition depends only on (n, kVec, W, G, kBlock), the same on every rank, so block b
// owns the same elements on every rank, and one thread reads, reduces and writes each.
//
// Why per-block barriers suffice (block b of rank r; "peer" = block b of another rank):
//  - before START, b writes only elements it owns (into the peers' slots `r`, push; or
//    nothing, pull), which only blocks b read in this call. START: every peer has written
//    what b reads (release after __syncthreads, acquire before __syncthreads).
//  - one-shot: after START every access of a region is a read; END holds b until every peer
//    has finished reading; b's writes go to `output`, private to rank r.
//  - two-shot push, phase 1: b sums its part of chunk r from its own slots and pushes the
//    result into slot r of every peer at chunk r's offsets. In phase 1 rank p reads only its
//    own slots at chunk p's offsets, and before START rank r wrote slot r of rank p only at
//    chunk p's offsets: the result pushes race with nobody. MID: every peer c has pushed its
//    part of chunk c before b copies it from slot c in phase 2.
//  - two-shot pull, phase 1: b writes its part of chunk r back into its own region in place;
//    before MID only b reads those elements (rank j reduces chunk j). MID: every peer c has
//    written its part of chunk c before b reads it in phase 2.
//  - END: b leaves only when every peer b has finished reading (its own slots, push; rank
//    r's region, pull). So when the whole kernel of rank r has finished (every b passed END),
//    no peer still reads what rank r writes next, and the next stream-ordered call (whose
//    partition may differ) or the host cannot overwrite data in use.
#pragma once

#include "kiln/comm/comm_contract.h"
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

// The sum over ranks in rank order where this rank's own term comes from `mine` (its input,
// in registers) and every other rank j's from this rank's slot j (what rank j pushed here).
template <int kWorld, int N, typename T>
__device__ __forceinline__ Vec<T, N> SumPushed(const T* own_region, long long stride, int rank, long long offset,
                                               const Vec<T, N>& mine) {
  Vec<T, N> x[kWorld];
#pragma unroll
  for (int j = 0; j < kWorld; ++j) x[j] = j == rank ? mine : LoadPeerVec<N>(own_region + j * stride + offset);
  float acc[N];
  SumInRankOrder<kWorld, N, T>(x, acc);
  return RoundToVec<T>(acc);
}

// Writes `value` at `offset` of slot `rank` in every peer's region (over NVLink).
template <int kWorld, int N, typename T>
__device__ __forceinline__ void PushToPeers(const KilnCommPeers& peers, long long stride, int rank, long long offset,
                                            const Vec<T, N>& value) {
#pragma unroll
  for (int p = 0; p < kWorld; ++p) {
    if (p == rank) continue;
    StoreVec<N>(static_cast<T*>(peers.data[p]) + rank * stride + offset, value);
  }
}

// The slot stride of the push kernels: n rounded up to whole vectors (the host sizes every
// region for kWorld slots of it).
template <int kVec>
__device__ __forceinline__ long long SlotStride(long long n) {
  return (n + kVec - 1) / kVec * kVec;
}

}  // namespace detail

// One-shot. With copy_input (push): every block writes the input vectors it owns into slot
// `rank` of every peer's region (remote stores over NVLink: posted, no round trip, and no
// local staging copy), START, then sums its vectors from this rank's own slots and its own
// input, in rank order. Without copy_input (pull, a registered input): START, then reads
// its vectors from every rank's region.
template <class S>
__device__ __forceinline__ void AllReduceOneShot(const KilnCommPeers& peers, unsigned* epochs, KilnCommControl* control,
                                                 const typename S::T* input, typename S::T* output, long long n,
                                                 int rank, bool copy_input, unsigned long long timeout_ns) {
  // input and output may be the same memory, so neither is __restrict__.
  using T = typename S::T;
  constexpr int kVec = S::kVec;
  constexpr int kWorld = S::kWorld;
  BlockBarrier<kWorld> barrier(peers, epochs, control, rank, timeout_ns);
  const long long nvec = n / kVec;
  const long long tail_element = nvec * kVec + threadIdx.x;
  const bool tail = detail::OwnsTailElement<S>(n);

  if (copy_input) {
    const long long stride = detail::SlotStride<kVec>(n);
    for (long long v = detail::FirstOffset<S::kBlock>(); v < nvec; v += detail::GridStride<S::kBlock>())
      detail::PushToPeers<kWorld, kVec, T>(peers, stride, rank, v * kVec, LoadVec<kVec>(input + v * kVec));
    Vec<T, 1> tail_value;
    if (tail) {
      tail_value.v[0] = input[tail_element];
      detail::PushToPeers<kWorld, 1, T>(peers, stride, rank, tail_element, tail_value);
    }
    if (!barrier.Arrive(kStartBarrier)) return;

    const T* own = detail::Region<kWorld, T>(peers, rank);
    for (long long v = detail::FirstOffset<S::kBlock>(); v < nvec; v += detail::GridStride<S::kBlock>()) {
      StoreVec<kVec>(output + v * kVec,
                     detail::SumPushed<kWorld, kVec, T>(own, stride, rank, v * kVec, LoadVec<kVec>(input + v * kVec)));
    }
    if (tail) output[tail_element] = detail::SumPushed<kWorld, 1, T>(own, stride, rank, tail_element, tail_value).v[0];
  } else {
    if (!barrier.Arrive(kStartBarrier)) return;
    for (long long v = detail::FirstOffset<S::kBlock>(); v < nvec; v += detail::GridStride<S::kBlock>()) {
      StoreVec<kVec>(output + v * kVec, ReduceOverRanks<kWorld, kVec, T>(peers, v * kVec));
    }
    if (tail) output[tail_element] = ReduceOverRanks<kWorld, 1, T>(peers, tail_element).v[0];
  }

  if (!barrier.Arrive(kEndBarrier)) return;
  barrier.Finish();
}

// Two-shot. With copy_input (push): every block writes the input vectors it owns of chunk c
// into slot `rank` of rank c's region (c != rank), START; phase 1 sums its vectors of chunk
// `rank` from this rank's slots and its own input, writes them to output and into slot
// `rank` of every peer's region (at chunk `rank`'s offsets, which nobody reads in phase 1),
// MID; phase 2 copies chunk c (c != rank) from this rank's slot c into output. Without
// copy_input (pull, a registered input): phase 1 reduces chunk `rank` from every region
// and writes it back into this rank's region in place, MID, phase 2 reads chunk c from
// rank c's region.
template <class S>
__device__ __forceinline__ void AllReduceTwoShot(const KilnCommPeers& peers, unsigned* epochs, KilnCommControl* control,
                                                 const typename S::T* input, typename S::T* output, long long n,
                                                 int rank, bool copy_input, unsigned long long timeout_ns) {
  using T = typename S::T;
  constexpr int kVec = S::kVec;
  constexpr int kWorld = S::kWorld;
  BlockBarrier<kWorld> barrier(peers, epochs, control, rank, timeout_ns);
  const long long nvec = n / kVec;
  const long long per = (nvec + kWorld - 1) / kWorld;
  const long long tail_element = nvec * kVec + threadIdx.x;
  const bool tail = detail::OwnsTailElement<S>(n);
  T* own = detail::Region<kWorld, T>(peers, rank);
  const detail::Chunk mine = detail::ChunkOf(rank, per, nvec);

  if (copy_input) {
    const long long stride = detail::SlotStride<kVec>(n);
#pragma unroll
    for (int c = 0; c < kWorld; ++c) {
      if (c == rank) continue;
      T* slot = static_cast<T*>(peers.data[c]) + rank * stride;
      const detail::Chunk chunk = detail::ChunkOf(c, per, nvec);
      for (long long v = chunk.begin + detail::FirstOffset<S::kBlock>(); v < chunk.end;
           v += detail::GridStride<S::kBlock>())
        StoreVec<kVec>(slot + v * kVec, LoadVec<kVec>(input + v * kVec));
    }
    Vec<T, 1> tail_value;
    if (tail) {  // the tail goes one-shot: to every peer
      tail_value.v[0] = input[tail_element];
      detail::PushToPeers<kWorld, 1, T>(peers, stride, rank, tail_element, tail_value);
    }
    if (!barrier.Arrive(kStartBarrier)) return;

    for (long long v = mine.begin + detail::FirstOffset<S::kBlock>(); v < mine.end;
         v += detail::GridStride<S::kBlock>()) {
      const Vec<T, kVec> sum = detail::SumPushed<kWorld, kVec, T>(own, stride, rank, v * kVec,
                                                                  LoadVec<kVec>(input + v * kVec));
      StoreVec<kVec>(output + v * kVec, sum);
      detail::PushToPeers<kWorld, kVec, T>(peers, stride, rank, v * kVec, sum);
    }
    if (tail) output[tail_element] = detail::SumPushed<kWorld, 1, T>(own, stride, rank, tail_element, tail_value).v[0];
    if (!barrier.Arrive(kMidBarrier)) return;

#pragma unroll
    for (int c = 0; c < kWorld; ++c) {
      if (c == rank) continue;
      const T* slot = own + c * stride;
      const detail::Chunk chunk = detail::ChunkOf(c, per, nvec);
      for (long long v = chunk.begin + detail::FirstOffset<S::kBlock>(); v < chunk.end;
           v += detail::GridStride<S::kBlock>())
        StoreVec<kVec>(output + v * kVec, LoadPeerVec<kVec>(slot + v * kVec));
    }
  } else {
    if (!barrier.Arrive(kStartBarrier)) return;
    // Phase 1: reduce chunk `rank` into this rank's region (in place) and into output.
    for (long long v = mine.begin + detail::FirstOffset<S::kBlock>(); v < mine.end;
         v += detail::GridStride<S::kBlock>()) {
      const Vec<T, kVec> sum = ReduceOverRanks<kWorld, kVec, T>(peers, v * kVec);
      StoreVec<kVec>(own + v * kVec, sum);
      StoreVec<kVec>(output + v * kVec, sum);
    }
    if (tail) output[tail_element] = ReduceOverRanks<kWorld, 1, T>(peers, tail_element).v[0];
    if (!barrier.Arrive(kMidBarrier)) return;

      // Phase 2: every other chunk c, already reduced by rank c, from rank c's region.
#pragma unroll
    for (int c = 0; c < kWorld; ++c) {
      if (c == rank) continue;
      const T* region = static_cast<const T*>(peers.data[c]);
      const detail::Chunk chunk = detail::ChunkOf(c, per, nvec);
      for (long long v = chunk.begin + detail::FirstOffset<S::kBlock>(); v < chunk.end;
           v += detail::GridStride<S::kBlock>())
        StoreVec<kVec>(output + v * kVec, LoadPeerVec<kVec>(region + v * kVec));
    }
  }

  if (!barrier.Arrive(kEndBarrier)) return;
  barrier.Finish();
}

}  // namespace comm
}  // namespace kiln
