// One k block of a block-scaled e4m3 GEMV on fp8 tensor cores: the pieces that
// fused_moe_fp8's decode GEMVs (kiln/moe/fused_moe_fp8_gemv.cuh) and fp8_gemm's small-M kernel
// (kiln/gemm/fp8_gemv.cuh) share. A warp multiplies 16 weight rows (the MMA's A: m16) with up to
// 8 input rows (its B: n8) over a 128-column k block of K (one scale block, kFp8ScaleBlock) by
// four mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 (PTX ISA, "Warp-level matrix
// multiply-accumulate instructions", sm_89+; fragments: "Matrix fragments for mma.m16n8k32"),
// so the weight bytes reach the MMA as loaded, with no conversion to floats. The block's sum is
// taken in a fresh accumulator and then added, times the weight rows' and the input row's scales,
// into fp32 totals: the tile kernels' promotion interval (one scale block), so the paths' errors
// are alike.
//
// The k order inside a k32 MMA is free as long as A and B agree: thread t of a lane quad loads
// the 16 bytes at k = 16 t of a 64-byte step of its weight rows and of its input row, and feeds
// words 0-1 to the step's first MMA and words 2-3 to its second (the fragment's k 4t..4t+3 and
// 16+4t..16+4t+3 are then actual k 16t..16t+7 and 16t+8..16t+15). A step is half a k block, so
// a k block is two steps, four MMAs. Lane (g = lane / 4, t = lane % 4) holds weight rows g and
// g + 8 of the warp's 16 and input row g; its accumulator q is weight row g (q < 2) or g + 8,
// input row 2 t + (q & 1).
#pragma once

#include "kiln/common/stream_dot.cuh"
#include "kiln/gemm/gemm_contract.h"

namespace kiln {
namespace gemm {

static_assert(kFp8GemvRowsPerWarp == 16 && kFp8GemvInputsPerPass == 8, "the MMA's m and n");

// D = A . B + C for one m16n8k32 e4m3 MMA.
__device__ __forceinline__ void MmaE4m3(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                        unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// One k block's operands of a thread: its two weight rows' and its slot's 16 bytes of each step,
// and the input scales of the two slots its accumulators hold.
struct Fp8GemvBlockLoad {
  uint4 w_lo[2];  // row g, steps 0 and 1
  uint4 w_hi[2];  // row g + 8
  uint4 x[2];     // slot g's input row
  float x_scale[2];
  float w_scale;
};

// Where a thread's loads come from, fixed for a pass.
struct Fp8GemvSources {
  const unsigned char* w_lo;  // row g of the warp's rows, at byte 16 t
  const unsigned char* w_hi;  // row g + 8
  const unsigned char* x;     // slot g's input row at byte 16 t (null: no slot, zeros)
  const float* x_scales[2];   // slots 2t, 2t + 1's input scale rows (null: no slot)
  const float* w_scales;      // the warp's rows' scale row: [ceil(k / 128)]
  int k;                      // bytes of a row
  int t;                      // the lane's place in its quad
  int prefetch;               // k blocks ahead asked of L2 (0: none; fused_moe_fp8's GEMVs may ask)
};

// Loads k block kb of a thread's operands (zeros past k; no input row: zeros and scale 0).
__device__ __forceinline__ void LoadFp8Block(const Fp8GemvSources& src, int kb, Fp8GemvBlockLoad& l) {
#pragma unroll
  for (int step = 0; step < 2; ++step) {
    const int byte = kb * kFp8ScaleBlock + step * 64 + 16 * src.t;
    const bool inside = byte < src.k;  // k is a multiple of 16: a thread's 16 bytes are all in or all out
    l.w_lo[step] = inside ? LoadStreamed(src.w_lo + kb * kFp8ScaleBlock + step * 64) : make_uint4(0, 0, 0, 0);
    l.w_hi[step] = inside ? LoadStreamed(src.w_hi + kb * kFp8ScaleBlock + step * 64) : make_uint4(0, 0, 0, 0);
    l.x[step] = inside && src.x != nullptr
                    ? __ldg(reinterpret_cast<const uint4*>(src.x + kb * kFp8ScaleBlock + step * 64))
                    : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) l.x_scale[e] = src.x_scales[e] != nullptr ? __ldg(src.x_scales[e] + kb) : 0.0f;
  l.w_scale = __ldg(src.w_scales + kb);
}

// total += (the k block's four MMAs) * w_scale * x_scale of each accumulator's slot.
__device__ __forceinline__ void AddFp8Block(const Fp8GemvBlockLoad& l, float (&total)[4]) {
  float block[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int step = 0; step < 2; ++step) {
    const uint4 lo = l.w_lo[step], hi = l.w_hi[step], x = l.x[step];
    MmaE4m3(block, lo.x, hi.x, lo.y, hi.y, x.x, x.y);
    MmaE4m3(block, lo.z, hi.z, lo.w, hi.w, x.z, x.w);
  }
  // Accumulator q: row g (q < 2) or g + 8, slot 2t + (q & 1).
#pragma unroll
  for (int q = 0; q < 4; ++q) total[q] = fmaf(block[q], l.w_scale * l.x_scale[q & 1], total[q]);
}

}  // namespace gemm
}  // namespace kiln
