// The device code of fused_moe_fp8's own kernels (kiln/moe/moe_contract.h, FusedMoeFp8QuantParams;
// docs/kernels-moe.md, "fp8 experts"): the two places where the layer's activations become the
// block-scaled e4m3 that grouped_fp8_gemm multiplies.
//
//   quantize                 v = x[row_to_slot[r] / top_k, :]             (the gather of moe_permute)
//   silu_and_mul_quantize    v = silu(in[r, :I]) * in[r, I:]              (fp32, not rounded first)
//
// then, per 128 columns of the row: scale = max(amax, kFp8MinAmax) / 448 and q = e4m3(v / scale).
// The decode path uses both by token (quantize: row r is x's row r) and by slot (silu: a row whose
// slot_to_row entry is -1 is skipped); kiln/moe/fused_moe_fp8_gemv.cuh multiplies what they write.
//
// One warp per `passes` x 256 columns of a row (FusedMoeFp8QuantPasses: one pass at decode, up to
// four for the grouped path), every pass's loads issued before the first conversion, so that a
// row's chunks and a chunk's passes run side by side (a warp walking a whole row, one load after
// the other, chained a load's latency per 256 columns: at one token, the decode path, or a few
// slots that made these kernels the layer's longest step, Mixtral's silu over I 14336 56 steps).
// In a pass a lane takes 8 consecutive columns (16 bytes of bf16): lanes 0-15 one scale group,
// lanes 16-31 the next. A group's amax is a butterfly over its 16 lanes (the same order every
// time: deterministic), then each lane converts its 8 values with 4 cvt.rn.satfinite.e4m3x2.f32
// and stores 8 bytes; the group's first lane stores the scale. The codes are those of an IEEE
// division v / scale (the host reference divides), computed from the scale's reciprocal once a
// group (QuotientByScale, kiln/moe/moe_contract.h). One warp per 256 columns with a division each (about ten
// instructions) left both kernels bound by instruction issue on an H100: 250 instructions a
// warp, 85 us to gather and quantize Qwen3-30B-A3B's 32768 rows of 2048 (2026-12-07).
// Rows from m_indptr[experts] on (and the row_to_slot -1 padding rows, which fused_moe_fp8's layout
// has none of) are the GEMM's business: not written, or written as zeros.
#pragma once

#include "kiln/activation/act_and_mul.cuh"
#include "kiln/common/grid_dependency.cuh"
#include "kiln/common/numeric.cuh"
#include "kiln/moe/fp8_group_quant.cuh"
#include "kiln/moe/moe_contract.h"

namespace kiln {
namespace moe {

static_assert(kFp8QuantGroup == 16 * 8, "a scale group is 16 lanes of 8 columns");
static_assert(kFp8QuantPassColumns == 2 * kFp8QuantGroup, "a pass is two scale groups");

// 8 bf16 (or fp16) of a 16-byte load, widened.
template <typename T>
__device__ __forceinline__ void Widen8(const uint4& raw, float (&v)[8]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = ToFloat(e[i]);
}

// One warp's item: kPasses passes of 256 columns of one row (items row-major, chunks =
// ceil(columns / (kPasses x 256)) a row). A lane past the row's end contributes zeros to its
// group's butterfly (every lane runs it) and stores nothing. The pass count is a template
// argument, so that a one-pass warp (the decode path) runs no instruction for passes it does not
// have, and the chunk arithmetic divides by a constant.
template <typename T, bool kSiluAndMul, int kPasses>
__device__ __forceinline__ void QuantizeItem(const FusedMoeFp8QuantParams& p) {
  constexpr int kWarpColumns = kPasses * kFp8QuantPassColumns;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const long long chunks = (p.columns + kWarpColumns - 1) / kWarpColumns;
  const long long item = static_cast<long long>(blockIdx.x) * kFp8QuantWarps + (threadIdx.x >> 5);
  const long long row = item / chunks;
  // Everything above reads the parameters alone, so under a programmatic launch (the decode path)
  // it runs while the kernel before finishes; only what that kernel wrote waits.
  GridDependencyWait();
  GridDependencyLaunchDependents();
  if (row >= p.rows || (p.m_indptr != nullptr && row >= p.m_indptr[p.experts])) return;  // warp-uniform
  const T* in = nullptr;
  if (kSiluAndMul) {
    // The decode path's rows are slots: a dropped id's gate and up were never written.
    if (p.row_to_slot != nullptr && p.row_to_slot[row] < 0) return;
    in = static_cast<const T*>(p.in) + row * p.in_stride;
  } else if (p.row_to_slot == nullptr) {
    in = static_cast<const T*>(p.in) + row * p.in_stride;  // the decode path: x by token
  } else {
    const int slot = p.row_to_slot[row];
    if (slot >= 0) in = static_cast<const T*>(p.in) + static_cast<long long>(slot / p.top_k) * p.in_stride;
  }
  unsigned char* q = static_cast<unsigned char*>(p.q) + row * p.q_stride;
  float* scales = p.scales + row * p.scale_stride;
  // This lane's column in pass 0; pass i is kFp8QuantPassColumns * i further.
  const int c0 = static_cast<int>(item - row * chunks) * kWarpColumns + lane * 8;
  uint4 raw[kPasses], raw_up[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int c = c0 + i * kFp8QuantPassColumns;
    raw[i] = raw_up[i] = make_uint4(0u, 0u, 0u, 0u);  // bf16 / fp16 zeros
    if (c < p.columns && in != nullptr) {
      raw[i] = __ldg(reinterpret_cast<const uint4*>(in + c));
      if (kSiluAndMul) raw_up[i] = __ldg(reinterpret_cast<const uint4*>(in + p.columns + c));
    }
  }
  float v[kPasses][8], amax[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    Widen8<T>(raw[i], v[i]);
    if (kSiluAndMul) {
      float up[8];
      Widen8<T>(raw_up[i], up);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[i][e] = activation::Silu::Apply(v[i][e]) * up[e];
    }
    amax[i] = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) amax[i] = fmaxf(amax[i], fabsf(v[i][e]));
  }
#pragma unroll
  for (int offset = 8; offset >= 1; offset >>= 1)
#pragma unroll
    for (int i = 0; i < kPasses; ++i) amax[i] = fmaxf(amax[i], __shfl_xor_sync(0xffffffffu, amax[i], offset));
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int c = c0 + i * kFp8QuantPassColumns;
    if (c >= p.columns) break;  // this lane's later passes are past the row's end too
    const float scale = Fp8GroupScale(amax[i]);
    float x[8];
    QuotientsByScale(v[i], scale, x);
    uint2 codes;
    codes.x = static_cast<unsigned>(ToE4m3x2(x[0], x[1])) | (static_cast<unsigned>(ToE4m3x2(x[2], x[3])) << 16);
    codes.y = static_cast<unsigned>(ToE4m3x2(x[4], x[5])) | (static_cast<unsigned>(ToE4m3x2(x[6], x[7])) << 16);
    *reinterpret_cast<uint2*>(q + c) = codes;
    if ((lane & 15) == 0) scales[c / kFp8QuantGroup] = scale;
  }
}

// A warp waits for the kernel before it (griddepcontrol.wait: a no-op in plain stream order)
// before its first global access, then lets the next kernel be scheduled, so the decode path
// launches it as a programmatic dependent; the grouped path launches it in plain stream order. The
// pass dispatch and the item's arithmetic come before the wait, so that at one token they overlap
// the kernel before instead of lengthening the decode layer's chain of dependent kernels.
template <typename T, bool kSiluAndMul>
__device__ __forceinline__ void QuantizeRow(const FusedMoeFp8QuantParams& p) {
  static_assert(kFp8QuantPasses == 4, "QuantizeRow dispatches one to four passes");
  // Uniform over the grid. Switched on 4 - passes because NVCC lays the largest case out first,
  // right after the dispatch, and the rest after it: the one-pass form (the decode path's, where a
  // kernel lasts about 2 us) then runs from where the instruction fetch already is, not from 28 KB
  // further on behind the three wide forms. With the wait first and this form last, Qwen3-30B-A3B's
  // layer at one token was 0.5 us slower than with main's one-pass-only kernels; with both
  // changes, the same (H100, 2026-12-07, bench/results/2026-12-07-h100-silu-epilogue-ab.md).
  switch (kFp8QuantPasses - p.passes) {
    case 3: QuantizeItem<T, kSiluAndMul, 1>(p); break;
    case 2: QuantizeItem<T, kSiluAndMul, 2>(p); break;
    case 1: QuantizeItem<T, kSiluAndMul, 3>(p); break;
    default: QuantizeItem<T, kSiluAndMul, 4>(p); break;
  }
}

}  // namespace moe
}  // namespace kiln
