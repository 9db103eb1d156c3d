// gemm's small-M kernel (kiln/gemm/gemm_contract.h, GemmGemvParams; docs/kernels-gemm.md,
// "Small M: the GEMV kernel"): D[r, j] = A[r, :] . B[j, :] (+ bias[j]) (+ beta * C[r, j]) for
// the M <= kGemvMaxRows rows of A. Warp w of block x takes the columns j0 = x *
// kGemvColumnsPerBlock + w * kGemvColumnsPerWarp, j0 + 1 (N is a multiple of 8: both or neither
// exist) and reads their rows of B once, 16 bytes a lane at a time, kGemvUnroll units of each
// row in flight (ld.global.nc.L1::no_allocate: B passes by, A's rows stay in L1 for the block's
// other warps; each weight unit is widened to fp32 once for all M rows). Each lane sums its
// units in fp32 in K order; the warp adds the lanes by a fixed butterfly; lane r writes row r's
// pair. The sums do not depend on timing.
#pragma once

#include "kiln/common/grid_dependency.cuh"
#include "kiln/common/numeric.cuh"
#include "kiln/common/pair_io.cuh"
#include "kiln/common/stream_dot.cuh"
#include "kiln/gemm/gemm_contract.h"

namespace kiln {
namespace gemm {

// 16-byte units of each of its warp's B rows a lane keeps in flight: 2 rows x 4 x 16 bytes =
// 128 bytes a lane, 32 KiB a block; at 2-3 blocks an SM that covers the memory latency at full
// bandwidth, as fused_moe's decode GEMVs measured.
constexpr int kGemvUnroll = 4;

template <typename T, typename TOut, int R>
__device__ __forceinline__ void GemvColumns(const GemmGemvParams& p, long long col0, int lane) {
  constexpr int kCols = kGemvColumnsPerWarp;
  const char* w[kCols];
#pragma unroll
  for (int i = 0; i < kCols; ++i)
    w[i] = static_cast<const char*>(p.b) + (col0 + i) * p.b_row_stride * static_cast<long long>(sizeof(T));
  const char* x[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    x[r] = static_cast<const char*>(p.a) + r * p.a_row_stride * static_cast<long long>(sizeof(T));
  float acc[kCols][R];
#pragma unroll
  for (int i = 0; i < kCols; ++i)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = 0.0f;

  const long long units = p.k / 8;  // 16-byte units of a row
  for (long long u0 = lane; u0 < units; u0 += 32 * kGemvUnroll) {
    uint4 wv[kGemvUnroll][kCols];
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const long long unit = u0 + 32 * u;
      if (unit < units) {
#pragma unroll
        for (int i = 0; i < kCols; ++i) wv[u][i] = LoadStreamed(w[i] + 16 * unit);
      }
    }
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      const long long unit = u0 + 32 * u;
      if (unit < units) {
        uint4 xv[R];
#pragma unroll
        for (int r = 0; r < R; ++r) xv[r] = __ldg(reinterpret_cast<const uint4*>(x[r] + 16 * unit));
          // Each weight unit widened once for all R rows (the widening, integer work on sm_90,
          // would otherwise cost as much as the loads bring in at R = 4: an SM takes in about one
          // 16-byte unit a clock at full bandwidth).
#pragma unroll
        for (int i = 0; i < kCols; ++i) {
          float wf[8];
          Widen8<T>(wv[u][i], wf);
#pragma unroll
          for (int r = 0; r < R; ++r) DotWidened8<T>(acc[i][r], wf, xv[r]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kCols; ++i)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[i][r] = GemvWarpSum(acc[i][r]);

  float bias0 = 0.0f, bias1 = 0.0f;
  if (p.bias != nullptr && lane < R) LoadPair(static_cast<const T*>(p.bias) + col0, bias0, bias1);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (lane != r) continue;  // lane r writes row r's two columns
    // The tile kernel's epilogue order: the sum + bias, then beta * C fused in, one rounding.
    float v0 = acc[0][r] + bias0;
    float v1 = acc[1][r] + bias1;
    if (p.c != nullptr) {
      float c0, c1;
      LoadPair(static_cast<const TOut*>(p.c) + r * p.c_row_stride + col0, c0, c1);
      v0 = fmaf(p.beta, c0, v0);
      v1 = fmaf(p.beta, c1, v1);
    }
    StorePair(static_cast<TOut*>(p.d) + r * p.d_row_stride + col0, v0, v1);
  }
}

template <typename T, typename TOut>
__device__ __forceinline__ void Gemv(const GemmGemvParams& p) {
  static_assert(sizeof(T) == 2, "gemm's A and B are 16-bit");
  static_assert(kGemvMaxRows == 4, "Gemv dispatches 1 to 4 rows");
  // A programmatic dependent waits for the kernels before it: it reads their A (and C) and
  // writes what they may read. The next kernel may be scheduled at once; it waits in turn.
  GridDependencyWait();
  GridDependencyLaunchDependents();
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const long long col0 = static_cast<long long>(blockIdx.x) * kGemvColumnsPerBlock +
                         static_cast<long long>(warp) * kGemvColumnsPerWarp;
  if (col0 >= p.n) return;  // n is even: col0 + 1 < n when col0 < n
  switch (p.m) {
    case 1: GemvColumns<T, TOut, 1>(p, col0, lane); break;
    case 2: GemvColumns<T, TOut, 2>(p, col0, lane); break;
    case 3: GemvColumns<T, TOut, 3>(p, col0, lane); break;
    default: GemvColumns<T, TOut, 4>(p, col0, lane); break;
  }
}

}  // namespace gemm
}  // namespace kiln
