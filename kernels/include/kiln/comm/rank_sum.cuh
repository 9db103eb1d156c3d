// The sum of one vector over every rank's data region, in fp32, in ascending rank order, so
// that every rank that computes an element gets the same bits; and the one rounding back
// to the element type.
#pragma once

#include "kiln/comm/comm_contract.h"
#include "kiln/comm/peer_load.cuh"
#include "kiln/common/numeric.cuh"
#include "kiln/common/vec.cuh"

namespace kiln {
namespace comm {

// acc[e] = float(x[0].v[e]) + float(x[1].v[e]) + ... in ascending rank order.
template <int kWorld, int N, typename T>
__device__ __forceinline__ void SumInRankOrder(const Vec<T, N> (&x)[kWorld], float (&acc)[N]) {
#pragma unroll
  for (int e = 0; e < N; ++e) acc[e] = ToFloat(x[0].v[e]);
#pragma unroll
  for (int j = 1; j < kWorld; ++j) {
#pragma unroll
    for (int e = 0; e < N; ++e) acc[e] += ToFloat(x[j].v[e]);
  }
}

// acc[e] = float(data_0[offset + e]) + float(data_1[offset + e]) + ... (ranks 0..kWorld-1).
// All kWorld loads are issued before the first add, so they are in flight together.
template <int kWorld, int N, typename T>
__device__ __forceinline__ void SumOverRanks(const KilnCommPeers& peers, long long offset, float (&acc)[N]) {
  Vec<T, N> x[kWorld];
#pragma unroll
  for (int j = 0; j < kWorld; ++j) x[j] = LoadPeerVec<N>(static_cast<const T*>(peers.data[j]) + offset);
  SumInRankOrder<kWorld, N, T>(x, acc);
}

// Round to nearest even, element by element (two 16-bit elements per instruction where the
// arch has one; the same rounding).
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> RoundToVec(const float (&f)[N]) {
  Vec<T, N> out;
  if constexpr (sizeof(T) == 2 && N % 2 == 0) {
    using Pair = typename PairOf<T>::type;
    Pair* out2 = reinterpret_cast<Pair*>(out.v);
#pragma unroll
    for (int e = 0; e < N / 2; ++e) out2[e] = FromFloat2<Pair>(f[2 * e], f[2 * e + 1]);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) out.v[e] = FromFloat<T>(f[e]);
  }
  return out;
}

template <int kWorld, int N, typename T>
__device__ __forceinline__ Vec<T, N> ReduceOverRanks(const KilnCommPeers& peers, long long offset) {
  float acc[N];
  SumOverRanks<kWorld, N, T>(peers, offset, acc);
  return RoundToVec<T>(acc);
}

}  // namespace comm
}  // namespace kiln
