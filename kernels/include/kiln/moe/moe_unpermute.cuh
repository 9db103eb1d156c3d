// The device code of moe_unpermute, the combine (kiln/moe/moe_contract.h, docs/kernels-moe.md):
// the grouped GEMM's output rows, in moe_permute's layout, back to one row per token:
//
//   out[t, :] = sum_{j < top_k, 0 <= slot_to_row[t, j] < rows} topk_weights[t, j] * expert_out[slot_to_row[t, j], :]
//
// Memory-bound: every byte of the token's top_k rows is read once and every byte of out written
// once, so the kernel is one thread per copy unit (16 bytes: 8 bf16 or fp16) of one token's row,
// with no reduction across threads. A block covers blockDim.x units of token blockIdx.x's row
// (blockIdx.y: which part of the row): tokens on grid.x because grid.x goes to 2^31 - 1 while
// grid.y and grid.z stop at 65535, and a row's blocks fit grid.y (the host checks it).
//
// The token's top_k row indices and weights are the same for the whole block: the first top_k
// threads load them once into shared memory (an index outside [0, rows) becomes -1 there, so
// no thread ever reads such a row), one barrier, then every thread issues the loads of its unit
// from the valid rows kBatch at a time (independent loads in flight before the first FMA), and
// accumulates them in fp32 in the order of j: the result does not depend on timing (no atomics),
// bit for bit. The sum is rounded once to the output type; a token with no valid row writes
// zeros (every element of out is written).
//
// fused_moe launches it as a programmatic dependent of its down GEMV: the block waits for the
// kernels before it (GridDependencyWait; at once in a plain stream-ordered launch) before it reads
// anything.
//
// The unit is chosen on the host (the widest of 16, 8, 4 and 2 bytes dividing the row's bytes,
// both row strides and both pointers, as moe_permute's gather); UnpermuteRow switches over it
// once, uniformly for the grid, into a body templated on the unit.
#pragma once

#include "kiln/common/grid_dependency.cuh"
#include "kiln/common/numeric.cuh"
#include "kiln/moe/moe_contract.h"

namespace kiln {
namespace moe {

// Loads in flight per thread before they are accumulated: top-8 routers (Qwen3, DeepSeek-V3)
// issue all their rows at once; top-16 in two rounds.
constexpr int kUnpermuteBatch = 8;

// A unit of N 16-bit elements, moved as one access of its own size.
template <int N>
struct UnpermuteUnit;
template <>
struct UnpermuteUnit<8> {
  using type = uint4;
};
template <>
struct UnpermuteUnit<4> {
  using type = uint2;
};
template <>
struct UnpermuteUnit<2> {
  using type = unsigned;
};
template <>
struct UnpermuteUnit<1> {
  using type = unsigned short;
};

// acc[i] += w * (the i-th element of `unit`), one fused multiply-add each (one rounding per term).
template <typename T, int N, typename U>
__device__ __forceinline__ void AccumulateUnit(float (&acc)[N], float w, const U& unit) {
  const T* elems = reinterpret_cast<const T*>(&unit);
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = fmaf(w, ToFloat(elems[i]), acc[i]);
}

// Unit `u` of token `t`'s row of out, from the rows and weights in shared memory (-1: no row).
template <typename T, int N>
__device__ __forceinline__ void UnpermuteUnits(const MoeUnpermuteParams& p, long long t, int u, const int* rows,
                                               const float* weights) {
  using U = typename UnpermuteUnit<N>::type;
  static_assert(sizeof(U) == N * sizeof(T), "a unit is N elements");
  float acc[N];
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  const char* base = static_cast<const char*>(p.expert_out) + static_cast<long long>(u) * sizeof(U);
  for (int j0 = 0; j0 < p.top_k; j0 += kUnpermuteBatch) {
    U loaded[kUnpermuteBatch];
#pragma unroll
    for (int k = 0; k < kUnpermuteBatch; ++k) {
      const int j = j0 + k;
      const int row = j < p.top_k ? rows[j] : -1;
      if (row >= 0) loaded[k] = *reinterpret_cast<const U*>(base + row * p.expert_stride_bytes);
    }
#pragma unroll
    for (int k = 0; k < kUnpermuteBatch; ++k) {
      const int j = j0 + k;
      if (j < p.top_k && rows[j] >= 0) AccumulateUnit<T, N>(acc, weights[j], loaded[k]);
    }
  }
  U result;
  T* out_elems = reinterpret_cast<T*>(&result);
#pragma unroll
  for (int i = 0; i < N; ++i) out_elems[i] = FromFloat<T>(acc[i]);
  char* out = static_cast<char*>(p.out) + t * p.out_stride_bytes + static_cast<long long>(u) * sizeof(U);
  *reinterpret_cast<U*>(out) = result;
}

// The block (token blockIdx.x, units blockIdx.y * blockDim.x + threadIdx.x of its row). T: the
// element type (bf16 or fp16). Every thread reaches the barrier: no thread leaves before it.
template <typename T>
__device__ __forceinline__ void UnpermuteRow(const MoeUnpermuteParams& p) {
  static_assert(sizeof(T) == 2, "moe_unpermute's element types are 16-bit");
  __shared__ int rows[kMaxTopK];
  __shared__ float weights[kMaxTopK];
  const long long t = static_cast<long long>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x);
  GridDependencyWait();
  if (tid < p.top_k) {
    const int row = p.slot_to_row[t * p.slot_to_row_stride + tid];
    // -1, any other negative value and anything at or past expert_out's end: no row.
    rows[tid] = row >= 0 && row < p.rows ? row : -1;
    weights[tid] = p.topk_weights[t * p.weights_stride + tid];
  }
  __syncthreads();
  const long long u = static_cast<long long>(blockIdx.y) * blockDim.x + tid;
  if (u >= p.units) return;
  switch (p.unit_bytes) {  // the same for the whole grid
    case 16: UnpermuteUnits<T, 8>(p, t, static_cast<int>(u), rows, weights); break;
    case 8: UnpermuteUnits<T, 4>(p, t, static_cast<int>(u), rows, weights); break;
    case 4: UnpermuteUnits<T, 2>(p, t, static_cast<int>(u), rows, weights); break;
    default: UnpermuteUnits<T, 1>(p, t, static_cast<int>(u), rows, weights); break;
  }
}

}  // namespace moe
}  // namespace kiln
