// Vector loads from a rank's data region (a peer's over NVLink P2P, or this rank's own) that
// see what the writing block published before its last barrier signal, within one kernel.
//
// ld.global.cg caches in L2 only. A peer's memory is served by the peer's L2, its point of
// coherence, and never held in this SM's L1, so a load cannot return a line that an earlier
// load of the same kernel left in L1 before the writer's barrier (two-shot phase 2 reads
// lines whose neighbours phase 1 read). The barrier's acquire orders the load after the
// writer's release; .cg makes that independent of how L1 is invalidated.
#pragma once

#include "kiln/common/vec.cuh"

namespace kiln {
namespace comm {

template <int N, typename T>
__device__ __forceinline__ Vec<T, N> LoadPeerVec(const T* p) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  static_assert(kBytes == 2 || kBytes == 4 || kBytes == 8 || kBytes == 16, "a peer load moves 2, 4, 8 or 16 bytes");
  Vec<T, N> out;
  if constexpr (kBytes == 16) {
    *reinterpret_cast<uint4*>(&out) = __ldcg(reinterpret_cast<const uint4*>(p));
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(&out) = __ldcg(reinterpret_cast<const uint2*>(p));
  } else if constexpr (kBytes == 4) {
    *reinterpret_cast<unsigned int*>(&out) = __ldcg(reinterpret_cast<const unsigned int*>(p));
  } else {
    *reinterpret_cast<unsigned short*>(&out) = __ldcg(reinterpret_cast<const unsigned short*>(p));
  }
  return out;
}

}  // namespace comm
}  // namespace kiln
