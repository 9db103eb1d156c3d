// fp8_gemm's small-M kernel (kiln/gemm/gemm_contract.h, Fp8GemmGemvParams; docs/kernels-gemm.md,
// "Small M on fp8: the GEMV kernel"):
//
//   d[i, j] = sum over k blocks b of a_scales[i, b] * b_scales[j / 128, b] * (a[i, :] . b[j, :] over block b)
//
// for i < m <= kFp8GemvMaxRows, on fp8 tensor cores one scale block at a time
// (kiln/gemm/fp8_gemv_block.cuh), each row of b read once from memory.
//
// A block (kGemvThreads) takes Fp8GemvBlockRows(P) rows of b (blockIdx.x), P = k_parts (2, 4 or
// 8): with G = 8 / P row groups, warp w takes rows 16 (w % G) .. + 15 and part w / G of the k
// blocks; the other parts' totals meet part 0's in shared memory, added in part order (a fixed
// order: deterministic for a given P, and P depends only on N and the SM count). Weight loads are
// ld.global.nc.L1::no_allocate (read once), one k block ahead of the MMAs. Rows of a beyond the
// first 8 take a second pass over the block's rows of b, read again from memory; the wide entry
// (Fp8GemmGemvWide, below) takes M 9-16 in one pass instead.
#pragma once

#include "kiln/common/grid_dependency.cuh"
#include "kiln/common/numeric.cuh"
#include "kiln/gemm/fp8_gemv_block.cuh"
#include "kiln/gemm/gemm_contract.h"

namespace kiln {
namespace gemm {

// Where a warp of either entry works: its lane and quad place, its 16-row group of b (row0;
// rows_in: n is a multiple of 16, so a warp's rows are all in or all out) and its part's share
// of K's scale blocks [kb_begin, kb_end).
struct Fp8GemvWarpWork {
  int lane, warp, parts, groups, group, part, g, t;
  long long row0;
  bool rows_in;
  int k, kb_begin, kb_end;
};

__device__ __forceinline__ Fp8GemvWarpWork Fp8GemvWarpWorkOf(const Fp8GemmGemvParams& p) {
  Fp8GemvWarpWork w;
  w.lane = static_cast<int>(threadIdx.x) & 31;
  w.warp = static_cast<int>(threadIdx.x) >> 5;
  w.parts = p.k_parts;  // 2, 4 or 8 (host-checked)
  w.groups = kGemvWarps / w.parts;
  w.group = w.warp % w.groups;
  w.part = w.warp / w.groups;
  w.g = w.lane >> 2;
  w.t = w.lane & 3;
  w.row0 = static_cast<long long>(blockIdx.x) * (w.groups * kFp8GemvRowsPerWarp) + w.group * kFp8GemvRowsPerWarp;
  w.rows_in = w.row0 < p.n;
  w.k = static_cast<int>(p.k);
  const int k_blocks = (w.k + kFp8ScaleBlock - 1) / kFp8ScaleBlock;
  const int kb_share = (k_blocks + w.parts - 1) / w.parts;
  w.kb_begin = min(w.part * kb_share, k_blocks);
  w.kb_end = min(w.kb_begin + kb_share, k_blocks);
  return w;
}

// The warp's weight rows g and g + 8 and their scale row for the shared loader, no input yet
// (no input row: it loads none and leaves zeros).
__device__ __forceinline__ Fp8GemvSources Fp8GemvWeightSources(const Fp8GemmGemvParams& p, const Fp8GemvWarpWork& w) {
  Fp8GemvSources src;
  src.w_lo = static_cast<const unsigned char*>(p.b) + (w.rows_in ? w.row0 + w.g : 0) * p.b_row_stride + 16 * w.t;
  src.w_hi = src.w_lo + 8 * p.b_row_stride;
  src.w_scales = p.b_scales + (w.rows_in ? w.row0 / kFp8ScaleBlock : 0) * p.b_scale_stride;
  src.x = nullptr;
  src.x_scales[0] = src.x_scales[1] = nullptr;
  src.k = w.k;
  src.t = w.t;
  src.prefetch = 0;
  return src;
}

template <typename TOut>
__device__ __forceinline__ void Fp8GemmGemv(const Fp8GemmGemvParams& p) {
  __shared__ float part_totals[kGemvWarps][32][4];  // parts 1.. of each row group, for part 0
  // A programmatic dependent waits for the kernels before it (it reads their A and scales and
  // writes what they may read); the next kernel may be scheduled at once and waits in turn.
  GridDependencyBegin();
  // Every warp reaches the barriers below: a warp without rows skips only its loads and MMAs.
  const Fp8GemvWarpWork w = Fp8GemvWarpWorkOf(p);
  const int lane = w.lane, warp = w.warp, parts = w.parts, groups = w.groups, group = w.group, part = w.part;
  const int g = w.g, t = w.t, kb_begin = w.kb_begin, kb_end = w.kb_end;
  const long long row0 = w.row0;
  const bool rows_in = w.rows_in;
  Fp8GemvSources src = Fp8GemvWeightSources(p, w);
  const unsigned char* a = static_cast<const unsigned char*>(p.a);
  const int m = static_cast<int>(p.m);
  for (int first = 0; first < m; first += kFp8GemvInputsPerPass) {
    src.x = first + g < m ? a + (first + g) * p.a_row_stride + 16 * t : nullptr;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int row = first + 2 * t + q;
      src.x_scales[q] = row < m ? p.a_scales + row * p.a_scale_stride : nullptr;
    }
    float total[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (rows_in && kb_begin < kb_end) {
      // Two buffers taking turns, each loaded a k block before its MMAs.
      Fp8GemvBlockLoad x, y;
      LoadFp8Block(src, kb_begin, x);
#pragma unroll 1
      for (int kb = kb_begin; kb < kb_end; kb += 2) {
        if (kb + 1 < kb_end) LoadFp8Block(src, kb + 1, y);
        AddFp8Block(x, total);
        if (kb + 1 >= kb_end) break;
        if (kb + 2 < kb_end) LoadFp8Block(src, kb + 2, x);
        AddFp8Block(y, total);
      }
    }
    // The other parts' totals join part 0's: part 0 + part 1 + ..., always in that order.
    if (part > 0) {
#pragma unroll
      for (int q = 0; q < 4; ++q) part_totals[warp][lane][q] = total[q];
    }
    __syncthreads();
    if (part == 0 && rows_in) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int row = first + 2 * t + (q & 1);  // accumulator q: a's row 2t + (q & 1), b's row g or g + 8
        if (row >= m) continue;
        float v = total[q];
        for (int other = 1; other < parts; ++other) v += part_totals[group + other * groups][lane][q];
        static_cast<TOut*>(p.d)[row * p.d_row_stride + row0 + g + 8 * (q >> 1)] = FromFloat<TOut>(v);
      }
    }
    __syncthreads();  // part_totals is rewritten by the next pass
  }
}

// kiln_fp8_gemm_gemv_wide: M 9-16 in one pass, two n-tiles of 8 rows of a on the same weight
// registers (eight MMAs a k block). Only the weights are loaded a k block ahead; both tiles'
// inputs come just before their MMAs, at addresses made from one row pointer and the strides,
// which keeps the kernel within kFp8GemvBlocksPerSm blocks' registers.
template <typename TOut>
__device__ __forceinline__ void Fp8GemmGemvWide(const Fp8GemmGemvParams& p) {
  __shared__ float part_totals[kGemvWarps][32][8];  // parts 1.. of each row group, for part 0
  GridDependencyBegin();
  const Fp8GemvWarpWork w = Fp8GemvWarpWorkOf(p);
  const int lane = w.lane, warp = w.warp, parts = w.parts, groups = w.groups, group = w.group, part = w.part;
  const int g = w.g, t = w.t, k = w.k, kb_begin = w.kb_begin, kb_end = w.kb_end;
  const long long row0 = w.row0;
  const bool rows_in = w.rows_in;
  const int m = static_cast<int>(p.m);  // 9 .. 16 (host-checked): one pass
  // The weights alone through the shared loader.
  const Fp8GemvSources weights = Fp8GemvWeightSources(p, w);
  // Tile i's input row g and scale rows 2t, 2t + 1: 8 i rows on from tile 0's (rows < 8 < m).
  const unsigned char* x0 = static_cast<const unsigned char*>(p.a) + g * p.a_row_stride + 16 * t;
  const float* s0 = p.a_scales + 2 * t * p.a_scale_stride;
  const long long x_tile = 8 * p.a_row_stride, s_row = p.a_scale_stride;
  const bool x1_in = 8 + g < m, s1_in[2] = {8 + 2 * t < m, 9 + 2 * t < m};
  float total[2][4] = {};
  if (rows_in && kb_begin < kb_end) {
    // The weights two buffers taking turns, a k block ahead as in Fp8GemmGemv; both tiles' inputs
    // are loaded just before their MMAs (L1 hits after the first row group: every row group of
    // the block reads the same rows of a), onto the weight registers of the block in hand.
    auto add = [&](int kb, Fp8GemvBlockLoad& l) {
#pragma unroll 1  // one tile's inputs in registers at a time (unrolled, ptxas keeps both: spills)
      for (int i = 0; i < 2; ++i) {
        const bool x_in = i == 0 || x1_in;
#pragma unroll
        for (int step = 0; step < 2; ++step) {
          const int byte = kb * kFp8ScaleBlock + step * 64 + 16 * t;
          l.x[step] = byte < k && x_in
                          ? __ldg(reinterpret_cast<const uint4*>(x0 + i * x_tile + kb * kFp8ScaleBlock + step * 64))
                          : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) l.x_scale[e] = i == 0 || s1_in[e] ? __ldg(s0 + (8 * i + e) * s_row + kb) : 0.0f;
        AddFp8Block(l, total[i]);
      }
    };
    Fp8GemvBlockLoad x, y;
    LoadFp8Block(weights, kb_begin, x);
#pragma unroll 1
    for (int kb = kb_begin; kb < kb_end; kb += 2) {
      if (kb + 1 < kb_end) LoadFp8Block(weights, kb + 1, y);
      add(kb, x);
      if (kb + 1 >= kb_end) break;
      if (kb + 2 < kb_end) LoadFp8Block(weights, kb + 2, x);
      add(kb + 1, y);
    }
  }
  // The other parts' totals join part 0's: part 0 + part 1 + ..., always in that order.
  if (part > 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int q = 0; q < 4; ++q) part_totals[warp][lane][4 * i + q] = total[i][q];
  }
  __syncthreads();
  if (part == 0 && rows_in) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int row = 8 * i + 2 * t + (q & 1);  // accumulator q of tile i; b's row g or g + 8
        if (row >= m) continue;
        float v = total[i][q];
        for (int other = 1; other < parts; ++other) v += part_totals[group + other * groups][lane][4 * i + q];
        static_cast<TOut*>(p.d)[row * p.d_row_stride + row0 + g + 8 * (q >> 1)] = FromFloat<TOut>(v);
      }
    }
  }
}

}  // namespace gemm
}  // namespace kiln
