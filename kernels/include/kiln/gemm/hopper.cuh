// The Hopper (sm_90a) machinery of the gemm family, as thin inline-PTX wrappers, each next to
// the PTX ISA section it relies on (names of the PTX ISA 9.0 sections, docs.nvidia.com/cuda/
// parallel-thread-execution):
//   mbarrier            "Parallel Synchronization and Communication Instructions: mbarrier"
//   TMA loads, stores   "Data Movement and Conversion Instructions: cp.async.bulk.tensor",
//                       "cp.async.bulk.commit_group", "cp.async.bulk.wait_group"
//   row gathers         "Data Movement and Conversion Instructions: cp.async",
//                       "cp.async.mbarrier.arrive", "cp.async.wait_all"
//   proxy fence         "Memory Consistency Model: Proxies", "membar/fence" (fence.proxy.async)
//   named barriers      "Parallel Synchronization and Communication Instructions: bar/barrier"
//   wgmma               "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
//   register realloc    "Miscellaneous Instructions: setmaxnreg"
//   dependent launch    "Parallel Synchronization and Communication Instructions: griddepcontrol"
//   clusters            "Special Registers: %cluster_ctarank, %clusterid, %nclusterid",
//                       "barrier.cluster", "Data Movement and Conversion Instructions: mapa",
//                       "ld" (the .shared::cluster state space: distributed shared memory)
// Shared-memory addresses are 32-bit (.shared::cta window), as cvta.to.shared gives them.
#pragma once

#include "kiln/common/cluster.cuh"
#include "kiln/common/grid_dependency.cuh"

namespace kiln {
namespace gemm {

// ---- mbarrier ("mbarrier.init", "mbarrier.arrive", "mbarrier.test_wait/try_wait") ----

__device__ __forceinline__ void BarrierInit(unsigned long long* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddress(bar)), "r"(arrivals) : "memory");
}

// Makes the initialized barriers visible to the async proxy (TMA) before anyone uses them
// ("fence.mbarrier_init"); the block then synchronizes.
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void BarrierArrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SmemAddress(bar)) : "memory");
}

// One arrival that also expects `bytes` of asynchronous transactions (the TMA loads of a
// stage, which complete_tx on the same barrier): the phase completes when both are done.
__device__ __forceinline__ void BarrierArriveExpectTx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddress(bar)), "r"(bytes) : "memory");
}

// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so
// waiting on parity 1 returns at once: the producer's first pass over empty stages.
__device__ __forceinline__ void BarrierWait(unsigned long long* bar, unsigned parity) {
  const unsigned address = SmemAddress(bar);
  unsigned done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(address), "r"(parity)
                 : "memory");
  } while (done == 0);
}

// ---- programmatic dependent launch ("griddepcontrol"): kiln/common/grid_dependency.cuh ----

// ---- thread-block clusters (split-K: the blocks of a cluster add their partial tiles) ----

// ClusterRank, ClusterId, ClusterCount, ClusterSync, ClusterAddress, SmemAddress:
// kiln/common/cluster.cuh (shared with the sampling family).

// One arrival on the mbarrier at cluster address `remote`, releasing this thread's earlier
// shared-memory writes to the cluster ("mbarrier.arrive", .release.cluster, .shared::cluster).
__device__ __forceinline__ void ClusterBarrierArrive(unsigned remote) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// One arrival on the mbarrier at cluster address `remote` with the default semantics (release at
// CTA scope), for a stage handed back to another block's producer: what must be complete before
// it (this warp's wgmma reads of the stage) is, by wgmma.wait_group, and a cluster-scope release
// would also wait for the wgmma group still in flight (measured: multicast gemm 1.3-2x slower).
__device__ __forceinline__ void RemoteBarrierArrive(unsigned remote) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// BarrierWait with cluster-scope acquire: what the arrivals of other blocks released is
// visible after ("mbarrier.try_wait", .acquire.cluster).
__device__ __forceinline__ void ClusterBarrierWait(unsigned long long* bar, unsigned parity) {
  const unsigned address = SmemAddress(bar);
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  } while (done == 0);
}

// Four floats at cluster address `remote` (16-byte aligned), in another block's shared memory.
__device__ __forceinline__ float4 ClusterLoad4(unsigned remote) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

// ---- TMA ("cp.async.bulk.tensor", "prefetch.tensormap") ----

// A 2-D tile of the tensor map at `map` (a __grid_constant__ kernel parameter) with its
// innermost coordinate `x` (elements) and row `y`, into shared memory at `dst` (1024-byte
// aligned for the 128-byte swizzle); completes `bytes` on `bar`. Out-of-bounds elements are
// zeros and still count as transferred bytes.
__device__ __forceinline__ void TmaLoad2d(void* dst, const void* map, unsigned long long* bar, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(SmemAddress(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(SmemAddress(bar))
      : "memory");
}

// A 3-D tile of the tensor map at `map` at coordinates (x, y, z), innermost first (elements),
// into shared memory at `dst`; otherwise as TmaLoad2d.
__device__ __forceinline__ void TmaLoad3d(void* dst, const void* map, unsigned long long* bar, int x, int y, int z) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(SmemAddress(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(z), "r"(SmemAddress(bar))
      : "memory");
}

// A 4-D tile at coordinates (x, y, z, w), innermost first; otherwise as TmaLoad2d.
__device__ __forceinline__ void TmaLoad4d(void* dst, const void* map, unsigned long long* bar, int x, int y, int z,
                                          int w) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];" ::"r"(SmemAddress(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(z), "r"(w), "r"(SmemAddress(bar))
      : "memory");
}

// TmaLoad2d into the same shared-memory offset of every block of the cluster in `cta_mask`
// (bit r: the block of rank r), each completing the bytes it receives on its own mbarrier at
// `bar`'s offset (the .multicast::cluster form of cp.async.bulk.tensor: one L2 read, several
// destinations).
__device__ __forceinline__ void TmaLoad2dMulticast(void* dst, const void* map, unsigned long long* bar, int x, int y,
                                                   unsigned short cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
      "{%2, %3}], [%4], %5;" ::"r"(SmemAddress(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(x), "r"(y), "r"(SmemAddress(bar)), "h"(cta_mask)
      : "memory");
}

// A 2-D tile from shared memory at `src` (128-byte aligned, laid out as the map's box: rows of
// box-width elements, no swizzle) to the tensor map's global tensor at element `x`, row `y`;
// the parts of the box outside the tensor are not written. Completes in the bulk async-group
// this thread commits next ("cp.async.bulk.tensor", .global.shared::cta.bulk_group).
__device__ __forceinline__ void TmaStore2d(const void* map, const void* src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                   reinterpret_cast<unsigned long long>(map)),
               "r"(x), "r"(y), "r"(SmemAddress(src))
               : "memory");
}
// "cp.async.bulk.commit_group", "cp.async.bulk.wait_group": this thread's bulk stores so far form
// a group; wait until at most kPending groups are still reading their shared memory (.read), or
// still writing global memory (no .read).
__device__ __forceinline__ void BulkCommit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void BulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
template <int kPending>
__device__ __forceinline__ void BulkWait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}
// Makes this thread's shared-memory writes (the generic proxy) visible to the async proxy (a TMA
// store that reads them): "fence.proxy.async", .shared::cta.
__device__ __forceinline__ void FenceProxyAsyncShared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Named barrier `id` (1..15; 0 is __syncthreads') for `threads` threads: one warp-group's own
// barrier ("bar.sync").
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives on named barrier `id` for `threads` threads without waiting ("bar.arrive"): the other
// side of a NamedBarrierSync of another warp-group (threads counts both).
__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- cp.async (non-bulk; PTX ISA "cp.async", "cp.async.mbarrier.arrive") ----

// 16 bytes from global `src` to shared `dst`, asynchronously, through L2 only (.cg); with
// `valid` false no byte is read and the 16 are zeros (src-size 0: the rest of cp-size is
// zero-filled), as TMA fills a box past the tensor's edge.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(SmemAddress(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// One arrival on `bar` once every cp.async this thread issued before it has written shared
// memory; .noinc: the arrival is one of the barrier's expected count (BarrierInit counts it), not
// added to it.
__device__ __forceinline__ void CpAsyncBarrierArrive(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(SmemAddress(bar)) : "memory");
}
// Waits until this thread's cp.async copies are all done ("cp.async.wait_all").
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_all;" ::: "memory"); }

__device__ __forceinline__ void TmaPrefetchDescriptor(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// ---- wgmma ("wgmma.fence", "wgmma.commit_group", "wgmma.wait_group", "Matrix Descriptor") ----

// The shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle: start
// address >> 4 in bits 0-13, leading byte offset (unused for swizzled K-major; 1 by
// convention) in bits 16-29, stride byte offset 1024 >> 4 (eight 128-byte rows: one swizzle
// atom to the next 8 rows) in bits 32-45, base offset 0 (atoms 1024-byte aligned), swizzle
// mode 1 (128 bytes) in bits 62-63. The next k16 slice of a 64-wide row is +32 bytes.
__device__ __forceinline__ unsigned long long SwizzledKMajorDescriptor(const void* smem) {
  const unsigned long long address = SmemAddress(smem);
  return ((address & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// `descriptor` moved on by `bytes` (a multiple of 16) inside the same shared-memory buffer: a
// 32-bit add of bytes >> 4 to the start-address field. The field (address >> 4 in bits 0-13)
// never reaches 2^14 (shared memory is below 256 KiB), so the add never carries out of it and
// the high word (stride offset, swizzle) stays as it is: the compiler keeps it in one register
// for every wgmma instead of masking and shifting each address anew.
__device__ __forceinline__ unsigned long long DescriptorPlus(unsigned long long descriptor, unsigned bytes) {
  const unsigned low = static_cast<unsigned>(descriptor) + (bytes >> 4);
  return (descriptor & 0xFFFFFFFF00000000ull) | low;
}

// Orders this thread's register and shared-memory accesses before the warpgroup's next wgmma.
__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accesses of an accumulator register across an asynchronous
// wgmma that is still writing it (an empty asm that "reads and writes" the register).
template <int N>
__device__ __forceinline__ void FenceAccumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---- register reallocation ("setmaxnreg") ----

// The producer warp-group gives registers back so the consumers, which hold the accumulators,
// can take them; every warp of a warp-group executes the same one.
template <int kRegisters>
__device__ __forceinline__ void ReleaseRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void ClaimRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

}  // namespace gemm
}  // namespace kiln
