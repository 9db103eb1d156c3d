// The sm_80 instructions batch_decode is built from, one wrapper each: cp.async (16-byte
// global → shared copies that fill zeros for an empty source), ldmatrix (8x8 b16 tiles from
// shared memory into the mma fragment layout, optionally transposed), movmatrix (an 8x8 b16
// transpose inside the registers of a warp), mma.sync m16n8k16 (fp16/bf16 in, fp32
// accumulate) and ex2.approx. PTX ISA 8.x names and fragment layouts ("Matrix fragments for
// mma.m16n8k16"): in a warp, lane = 4 * group + thread_in_group.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kiln/common/numeric.cuh"

namespace kiln {
namespace decode {

__device__ __forceinline__ unsigned SharedAddress(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// 16 bytes from global `src` to shared `dst`, bypassing L1 (KV is read once). With `valid`
// false nothing is read and the 16 bytes become zeros.
__device__ __forceinline__ void CpAsync16(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 matrices; lanes 8j..8j+7 give the row addresses of matrix j, which lands in
// r[j]: lane (g, t) receives row g, columns 2t and 2t+1. The "memory" clobber keeps the read
// after the __syncthreads() that makes the tile visible (the asm names no memory operand).
__device__ __forceinline__ void LdMatrixX4(unsigned (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// The same, transposed: lane (g, t) receives rows 2t and 2t+1 of column g.
__device__ __forceinline__ void LdMatrixX4Trans(unsigned (&r)[4], unsigned address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// An 8x8 b16 matrix held one pair per lane (lane (g, t): row g, columns 2t, 2t+1) becomes its
// transpose in the same layout.
__device__ __forceinline__ unsigned MovMatrixTrans(unsigned x) {
  unsigned y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// d += a (16x16, row major) * b (16x8, column major), fp32 accumulators.
template <typename T>
__device__ __forceinline__ void Mma16x8x16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);

template <>
__device__ __forceinline__ void Mma16x8x16<__nv_bfloat16>(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                                          unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void Mma16x8x16<__half>(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x, one MUFU instruction (relative error about 2^-22); 2^-inf = 0.
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats as one register of two T, `low` in the low half (the lower column).
template <typename T>
__device__ __forceinline__ unsigned PackPair(float low, float high) {
  const typename PairOf<T>::type pair = FromFloat2<typename PairOf<T>::type>(low, high);
  return *reinterpret_cast<const unsigned*>(&pair);
}

}  // namespace decode
}  // namespace kiln
