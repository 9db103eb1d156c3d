// The device code of fused_moe_fp8's decode path (kiln/moe/moe_contract.h, FusedMoeFp8GemvScales;
// docs/kernels-moe.md, "The fp8 decode path"): the expert products of a layer on
// block-scaled e4m3 weights as GEMVs over the slots of each chosen expert, with the activations
// quantized as on the grouped path (so both paths compute DeepSeek-V3's W8A8 recipe):
//
//   gate_up  out[s, c] = sum over k blocks b of w13_scale[e, c / 128, b] * in_scale[s / top_k, b] *
//                        (w13[e, c, k] . in[s / top_k, k] over the block's k)      c < 2I
//   down     out[s, h] = the same with w2, in and in_scale by slot                  h < H
//
// out is bf16 by slot (the gate and up rows the silu-and-quantize kernel reads, then y for the
// combine), rounded once. The products are fp8 tensor-core MMAs over one k block at a time, A 16
// weight rows and B the input rows of up to 8 slots (the columns), so a pass over the weights
// serves 8 slots of the expert: kiln/gemm/fp8_gemv_block.cuh, which fp8_gemm's small-M kernel
// shares, says how.
//
// A block (kGemvBlock threads, FindExpertSlots' prologue) takes one chosen expert (blockIdx.y-th
// in id order) and FusedMoeFp8GemvRows(P) weight rows (blockIdx.x), P = k_parts (2, 4 or 8): with
// G = 8 / P row groups, warp w takes rows 16 (w % G) .. + 15 and part w / G of the k blocks; the
// other parts' totals meet part 0's in shared memory, added in part order (a fixed order:
// deterministic for a given P). Weight loads are ld.global.nc.L1::no_allocate (read
// once), one k block ahead of the MMAs (and, with prefetch_blocks, asked of L2 that many blocks
// ahead). A further pass of 8 slots reads the rows again (from L2 where they are still there);
// fused_moe_fp8's path rule keeps such calls few.
#pragma once

#include "kiln/common/grid_dependency.cuh"
#include "kiln/common/numeric.cuh"
#include "kiln/common/stream_dot.cuh"
#include "kiln/gemm/fp8_gemv_block.cuh"
#include "kiln/moe/fused_moe_gemv.cuh"
#include "kiln/moe/moe_contract.h"

namespace kiln {
namespace moe {

using gemm::AddFp8Block;
using gemm::Fp8GemvBlockLoad;
using gemm::Fp8GemvSources;
using gemm::kFp8GemvRowsPerWarp;
using gemm::LoadFp8Block;
constexpr int kFp8GemvSlotsPerPass = gemm::kFp8GemvInputsPerPass;
static_assert(FusedMoeFp8GemvRows(kFp8GemvMinKParts) == kFp8GemvColumns, "the widest block is the entries' hint");
static_assert(FusedMoeFp8GemvRows(kFp8GemvMaxKParts) == kFp8GemvRowsPerWarp, "at most 8 parts: one row group");
static_assert(kFp8QuantGroup == gemm::kFp8ScaleBlock, "a k block is one scale block: two 64-byte steps");

// Lane 0 of each quad asks L2 for k block kb of its two weight rows (the part of the block inside
// the row; w_lo and w_hi are the rows' starts for that lane), nothing when kb is at or past `end`.
__device__ __forceinline__ void PrefetchFp8Block(const Fp8GemvSources& src, int kb, int end) {
  if (src.t != 0 || kb >= end) return;
  const int begin = kb * kFp8QuantGroup;
  const unsigned bytes = static_cast<unsigned>(min(kFp8QuantGroup, src.k - begin));  // a multiple of 16
  PrefetchRowToL2(src.w_lo + begin, bytes);
  PrefetchRowToL2(src.w_hi + begin, bytes);
}

// Shared memory of a block: the expert and its slots, and each warp's totals (part 0's warps add
// the other parts').
struct Fp8GemvShared {
  GemvShared slots;
  float part_totals[kGemvWarps][32][4];
};

// The block (rows blockIdx.x * FusedMoeFp8GemvRows(k_parts) .., expert of rank blockIdx.y): every slot of the
// expert, kFp8GemvSlotsPerPass a pass. kByToken: slot s reads input row s / top_k (gate_up: x
// quantized by token), else row s (down: the activations by slot). T: out's element type.
//
// Programmatic dependent launch (the decode path's five launches are programmatic dependents
// unless KILN_FUSED_MOE_PDL=0): both GEMVs wait (griddepcontrol.wait, a no-op in plain stream
// order) before they read anything, then let the next kernel be scheduled; correct either way.
template <typename T, bool kByToken>
__device__ __forceinline__ void Fp8ExpertGemv(const FusedMoeGemvParams& p, const FusedMoeFp8GemvScales& sc) {
  static_assert(sizeof(T) == 2, "out is bf16");
  __shared__ Fp8GemvShared sh;
  GridDependencyWait();
  GridDependencyLaunchDependents();
  const int e = FindExpertSlots(p, sh.slots);
  if (e < 0) return;  // block-uniform
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int parts = sc.k_parts;  // 2, 4 or 8 (host-checked)
  const int groups = kGemvWarps / parts;
  const int group = warp % groups, part = warp / groups;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = static_cast<int>(blockIdx.x) * (groups * kFp8GemvRowsPerWarp) + group * kFp8GemvRowsPerWarp;
  // n is a multiple of 16: a warp's 16 rows are all in or all out. Every warp reaches the
  // barriers below: a warp without rows skips only its loads and MMAs.
  const bool rows_in = row0 < p.n;
  const unsigned char* expert = static_cast<const unsigned char*>(p.weight) + e * p.weight_expert_stride;
  const int k_blocks = (p.k + kFp8QuantGroup - 1) / kFp8QuantGroup;
  const int kb_share = (k_blocks + parts - 1) / parts;
  const int kb_begin = min(part * kb_share, k_blocks), kb_end = min(kb_begin + kb_share, k_blocks);
  Fp8GemvSources src;
  src.w_lo = expert + static_cast<long long>(rows_in ? row0 + g : 0) * p.weight_row_stride + 16 * t;
  src.w_hi = src.w_lo + 8 * p.weight_row_stride;
  src.w_scales = sc.weight_scales + e * sc.weight_scale_expert_stride +
                 static_cast<long long>(row0 / kFp8QuantGroup) * sc.weight_scale_row_stride;
  src.k = p.k;
  src.t = t;
  src.prefetch = sc.prefetch_blocks;
  const unsigned char* in = static_cast<const unsigned char*>(p.in);
  const int count = sh.slots.count;
  for (int first = 0; first < count; first += kFp8GemvSlotsPerPass) {
    auto input_row = [&](int j) -> long long {  // slot first + j's input row, -1 past the expert's slots
      if (first + j >= count) return -1;
      const int s = sh.slots.slots[first + j];
      return kByToken ? s / p.top_k : s;
    };
    const long long row_g = input_row(g);
    src.x = row_g >= 0 ? in + row_g * p.in_stride + 16 * t : nullptr;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const long long r = input_row(2 * t + q);
      src.x_scales[q] = r >= 0 ? sc.in_scales + r * sc.in_scale_stride : nullptr;
    }
    float total[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (rows_in && kb_begin < kb_end) {
      // Two buffers taking turns, each loaded a k block before its MMAs.
      Fp8GemvBlockLoad a, b;
      // With prefetching: the loads of block L ask L2 for block L + prefetch; blocks kb_begin + 2
      // .. kb_begin + prefetch are asked for first (kb_begin and kb_begin + 1 are loaded at once).
      for (int ahead = 2; ahead <= src.prefetch; ++ahead) PrefetchFp8Block(src, kb_begin + ahead, kb_end);
      LoadFp8Block(src, kb_begin, a);
#pragma unroll 1
      for (int kb = kb_begin; kb < kb_end; kb += 2) {
        if (kb + 1 < kb_end) LoadFp8Block(src, kb + 1, b);
        if (src.prefetch > 0) PrefetchFp8Block(src, kb + 1 + src.prefetch, kb_end);
        AddFp8Block(a, total);
        if (kb + 1 >= kb_end) break;
        if (kb + 2 < kb_end) LoadFp8Block(src, kb + 2, a);
        if (src.prefetch > 0) PrefetchFp8Block(src, kb + 2 + src.prefetch, kb_end);
        AddFp8Block(b, total);
      }
    }
    // The other parts' totals join part 0's: part 0 + part 1 + ..., always in that order.
    if (part > 0) {
#pragma unroll
      for (int q = 0; q < 4; ++q) sh.part_totals[warp][lane][q] = total[q];
    }
    __syncthreads();
    if (part == 0 && rows_in) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int j = 2 * t + (q & 1);
        if (first + j >= count) continue;
        float v = total[q];
        for (int other = 1; other < parts; ++other) v += sh.part_totals[group + other * groups][lane][q];
        const long long slot = sh.slots.slots[first + j];
        T* out = static_cast<T*>(p.out) + slot * p.out_stride + row0 + g + 8 * (q >> 1);
        *out = FromFloat<T>(v);
      }
    }
    __syncthreads();  // part_totals is rewritten by the next pass
  }
}

}  // namespace moe
}  // namespace kiln
