// Thread-block clusters (sm_90+) as thin inline-PTX wrappers, each next to the PTX ISA section
// it relies on (PTX ISA 9.0, docs.nvidia.com/cuda/parallel-thread-execution):
//   "Special Registers: %cluster_ctarank, %clusterid, %nclusterid"
//   "Parallel Synchronization and Communication Instructions: barrier.cluster"
//   "Data Movement and Conversion Instructions: mapa", "ld" (the .shared::cluster state space:
//   distributed shared memory)
// Shared-memory addresses are 32-bit (.shared::cta window), as cvta.to.shared gives them. Used
// by the gemm family (split-K, multicast) and the sampling family (a row over several blocks);
// only code compiled for sm_90+ may call these.
#pragma once

namespace kiln {

__device__ __forceinline__ unsigned SmemAddress(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ unsigned ClusterRank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned ClusterId() {
  unsigned r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned ClusterCount() {
  unsigned r;
  asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}

// Every thread of every block of the cluster: the writes before (barrier inits included) are
// visible cluster-wide after. All threads must take part ("barrier.cluster": .aligned).
__device__ __forceinline__ void ClusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The address in block `rank` of the cluster of the shared variable at `local` ("mapa").
__device__ __forceinline__ unsigned ClusterAddress(const void* local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(SmemAddress(local)), "r"(rank));
  return remote;
}

// The 64-bit word at cluster address `remote` (8-byte aligned), in another block's shared memory.
__device__ __forceinline__ unsigned long long ClusterLoadU64(unsigned remote) {
  unsigned long long v;
  asm volatile("ld.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(remote) : "memory");
  return v;
}

}  // namespace kiln
