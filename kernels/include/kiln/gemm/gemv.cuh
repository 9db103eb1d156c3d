// gemm's small-M kernels (kiln/gemm/gemm_contract.h, GemmGemvParams; docs/kernels-gemm.md,
// "Small M: the GEMV kernels"): D[r, j] = A[r, :] . B[j, :] (+ bias[j]) (+ beta * C[r, j]) for
// the M <= kGemvWideMaxRows rows of A, each block owning kGemvColumnsPerBlock columns of D and
// reading their rows of B once (ld.global.nc.L1::no_allocate: B passes by, A's rows stay in L1
// for the block's other warps). Gemv (the fp32 kernel, one row): warp w of block x takes the
// columns j0 = x * kGemvColumnsPerBlock + w * kGemvColumnsPerWarp and j0 + 1 (N is a multiple
// of 8: both or neither exist), 16 bytes a lane at a time with kGemvUnroll units of each row in
// flight; each lane sums its units in fp32 in K order and the warp adds the lanes by a fixed
// butterfly. GemvMma (M 2 to 16) and GemvMmaWide (17 to 32): below. All write through
// StoreGemvPair; the sums do not depend on timing.
#pragma once

#include "kiln/common/grid_dependency.cuh"
#include "kiln/common/numeric.cuh"
#include "kiln/common/pair_io.cuh"
#include "kiln/common/stream_dot.cuh"
#include "kiln/decode/warp_mma.cuh"
#include "kiln/gemm/gemm_contract.h"

namespace kiln {
namespace gemm {

// 16-byte units of each of its warp's B rows a lane keeps in flight: 2 rows x 4 x 16 bytes =
// 128 bytes a lane, 32 KiB a block; at 2-3 blocks an SM that covers the memory latency at full
// bandwidth, as fused_moe's decode GEMVs measured.
constexpr int kGemvUnroll = 4;

// D[r, col .. col + 1] = the sums + bias, then beta * C fused in, one rounding: the tile
// kernel's epilogue order.
template <typename T, typename TOut>
__device__ __forceinline__ void StoreGemvPair(const GemmGemvParams& p, long long r, long long col, float v0, float v1) {
  if (p.bias != nullptr) {
    float bias0, bias1;
    LoadPair(static_cast<const T*>(p.bias) + col, bias0, bias1);
    v0 += bias0;
    v1 += bias1;
  }
  if (p.c != nullptr) {
    float c0, c1;
    LoadPair(static_cast<const TOut*>(p.c) + r * p.c_row_stride + col, c0, c1);
    v0 = fmaf(p.beta, c0, v0);
    v1 = fmaf(p.beta, c1, v1);
  }
  StorePair(static_cast<TOut*>(p.d) + r * p.d_row_stride + col, v0, v1);
}

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
        // Each weight unit widened once for all R rows (integer work on sm_90; an SM takes in
        // about one 16-byte unit a clock at full bandwidth, so at R = 4 even this kernel was
        // compute-bound on the H200, and it runs one row: the mma kernel takes the rest).
        uint4 xv[R];
#pragma unroll
        for (int r = 0; r < R; ++r) xv[r] = __ldg(reinterpret_cast<const uint4*>(x[r] + 16 * unit));
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

#pragma unroll
  for (int r = 0; r < R; ++r)
    if (lane == r) StoreGemvPair<T, TOut>(p, r, col0, acc[0][r], acc[1][r]);  // lane r writes row r
}

template <typename T, typename TOut>
__device__ __forceinline__ void Gemv(const GemmGemvParams& p) {
  static_assert(sizeof(T) == 2, "gemm's A and B are 16-bit");
  static_assert(kGemvScalarMaxRows == 1, "one row: the mma kernel takes two and more");
  // A programmatic dependent waits for the kernels before it: it reads their A (and C) and
  // writes what they may read. The next kernel may be scheduled at once; it waits in turn.
  GridDependencyWait();
  GridDependencyLaunchDependents();
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const long long col0 = static_cast<long long>(blockIdx.x) * kGemvColumnsPerBlock +
                         static_cast<long long>(warp) * kGemvColumnsPerWarp;
  if (col0 >= p.n) return;  // n is even: col0 + 1 < n when col0 < n
  GemvColumns<T, TOut, kGemvScalarMaxRows>(p, col0, lane);
}

// The mma kernel (kGemmGemvMmaEntry, M up to kGemvMaxRows): block x owns B's rows j0 = 16x ..
// j0 + 15, the A operand of mma.sync m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16":
// lane (g, c) = (lane / 4, lane % 4) holds rows g and g + 8, k pairs 2c and 2c + 8), and A's
// rows, 8 per n-tile, are its B operand (lane (g, c): row g of the tile, the same k pairs). The
// dot product does not depend on the order of K, so instead of the fragment's k order each lane
// loads whole 16-byte units: in step s, lane (g, c) reads unit 4s + c of rows g and g + 8 of B
// and of row g of each A tile, and its four pairs p0..p3 feed two mmas, (p0, p1) as k pairs
// (2c, 2c + 8) and (p2, p3) likewise: every lane of the same c maps the same physical K to the
// same logical k, in A and B alike. Warp w takes an eighth of the steps (kGemvMmaSteps in
// flight, kSteps: 2 x 4 x 16 bytes of B a lane); the warps' 16 x 8 partial tiles meet in shared memory
// and are added in warp order. Units past K, rows of B past N and rows of A past M read as
// zeros.
constexpr int kGemvMmaSteps = 4;

template <int kTiles>
struct GemvMmaShared {
  float partial[kGemvWarps][kTiles][32][4];  // warp, n-tile, lane, fragment register
};

template <typename T, typename TOut, int kTiles, int kSteps = kGemvMmaSteps>
__device__ __forceinline__ void GemvMmaTiles(const GemmGemvParams& p, long long row0) {
  __shared__ GemvMmaShared<kTiles> sh;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int g = lane >> 2, c = lane & 3;
  const long long es = static_cast<long long>(sizeof(T));
  const bool b_lo = row0 + g < p.n, b_hi = row0 + g + 8 < p.n;
  const char* b_rows[2] = {static_cast<const char*>(p.b) + (b_lo ? row0 + g : 0) * p.b_row_stride * es,
                           static_cast<const char*>(p.b) + (b_hi ? row0 + g + 8 : 0) * p.b_row_stride * es};
  const char* a_rows[kTiles];
  bool a_ok[kTiles];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const long long r = 8 * t + g;
    a_ok[t] = r < p.m;
    a_rows[t] = static_cast<const char*>(p.a) + (a_ok[t] ? r : 0) * p.a_row_stride * es;
  }
  float d[kTiles][4];
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int q = 0; q < 4; ++q) d[t][q] = 0.0f;

  const long long units = p.k / 8;
  const long long steps = (units + 3) / 4;
  const long long per_warp = (steps + kGemvWarps - 1) / kGemvWarps;
  const long long first = per_warp * warp;
  const long long last = first + per_warp < steps ? first + per_warp : steps;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (long long s0 = first; s0 < last; s0 += kSteps) {
    uint4 lo[kSteps], hi[kSteps];
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const long long unit = 4 * (s0 + j) + c;
      const bool in = s0 + j < last && unit < units;
      lo[j] = in && b_lo ? LoadStreamed(b_rows[0] + 16 * unit) : zero;
      hi[j] = in && b_hi ? LoadStreamed(b_rows[1] + 16 * unit) : zero;
    }
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      const long long unit = 4 * (s0 + j) + c;
      const bool in = s0 + j < last && unit < units;
      const unsigned first_half[4] = {lo[j].x, hi[j].x, lo[j].y, hi[j].y};
      const unsigned second_half[4] = {lo[j].z, hi[j].z, lo[j].w, hi[j].w};
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const uint4 x = in && a_ok[t] ? __ldg(reinterpret_cast<const uint4*>(a_rows[t] + 16 * unit)) : zero;
        decode::Mma16x8x16<T>(d[t], first_half, x.x, x.y);
        decode::Mma16x8x16<T>(d[t], second_half, x.z, x.w);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int q = 0; q < 4; ++q) sh.partial[warp][t][lane][q] = d[t][q];
  __syncthreads();

  // Output pairs: thread i takes row r = i / 8 of D and columns j0 + 2q, j0 + 2q + 1 (q = i % 8).
  // Fragment register q' of lane (g, c) in tile t holds D row 8t + 2c + (q' & 1), column
  // j0 + g + 8 (q' >> 1).
  const int i = static_cast<int>(threadIdx.x);
  const long long r = i / 8;
  const int q = i % 8;
  const long long col = row0 + 2 * q;
  if (r >= p.m || col >= p.n) return;  // n is a multiple of 8: col + 1 < n too
  const int t = static_cast<int>(r / 8), rn = static_cast<int>(r % 8);
  float v[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int jj = 2 * q + e;  // column within the block's 16
    const int src_lane = 4 * (jj % 8) + rn / 2;
    const int reg = 2 * (jj / 8) + (rn % 2);
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) sum += sh.partial[w][t][src_lane][reg];
    v[e] = sum;
  }
  StoreGemvPair<T, TOut>(p, r, col, v[0], v[1]);
}

template <typename T, typename TOut>
__device__ __forceinline__ void GemvMma(const GemmGemvParams& p) {
  static_assert(sizeof(T) == 2, "gemm's A and B are 16-bit");
  static_assert(kGemvMaxRows == 16 && kGemvThreads >= 8 * kGemvMaxRows, "two n-tiles; a thread per output pair");
  GridDependencyWait();
  GridDependencyLaunchDependents();
  const long long row0 = static_cast<long long>(blockIdx.x) * kGemvColumnsPerBlock;
  if (p.m <= 8) GemvMmaTiles<T, TOut, 1>(p, row0);
  else GemvMmaTiles<T, TOut, 2>(p, row0);
}

// The wide kernel (kGemmGemvMmaWideEntry, M kGemvMaxRows + 1 .. kGemvWideMaxRows): four n-tiles
// whatever M (the tiles past M multiply zeros: the mmas are far from the time B takes to stream
// at these sizes) and kGemvWideSteps steps of B in flight a lane (four steps and four tiles
// spilled at kGemvBlocksPerSm blocks an SM; two do not). A thread per output pair as above: 8 x
// 32 = kGemvThreads.
template <typename T, typename TOut>
__device__ __forceinline__ void GemvMmaWide(const GemmGemvParams& p) {
  static_assert(sizeof(T) == 2, "gemm's A and B are 16-bit");
  static_assert(kGemvWideMaxRows == 32 && kGemvThreads >= 8 * kGemvWideMaxRows, "four n-tiles; a thread per pair");
  GridDependencyBegin();  // as the other entries: wait for the kernels before, then release the next
  GemvMmaTiles<T, TOut, 4, kGemvWideSteps>(p, static_cast<long long>(blockIdx.x) * kGemvColumnsPerBlock);
}

}  // namespace gemm
}  // namespace kiln
