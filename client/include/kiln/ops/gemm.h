// kiln::ops gemm: matrix multiplication on Hopper tensor cores (sm_90a devices: H100, H200).
//
//   d = a · bᵀ (+ bias) (+ beta · c)          fp32 accumulation, one rounding to d's dtype
//
//   a     [..., K]  bf16 or fp16; leading dims are flattened into M rows (their strides must
//                   allow it), the last dim has stride 1; row stride a multiple of 8 elements;
//                   16-byte aligned (TMA reads it)
//   b     [N, K]    a's dtype, K-major (as torch.nn.functional.linear stores a weight): last dim
//                   stride 1, row stride a multiple of 8; 16-byte aligned
//   d     [..., N]  a's leading dims; bf16, fp16 or fp32; last dim stride 1, even row stride,
//                   aligned to two elements; written, must not overlap a, b, bias or c
//   bias  [N]       nullable; a's dtype, contiguous, aligned to two elements
//   c     d's shape and dtype, nullable: beta · c is added (c may be d itself: d += a·bᵀ);
//                   last dim stride 1, even row stride, aligned to two elements
//   beta  finite; 0 means c is not read
//   N, K  multiples of 8 (16-byte rows for TMA); M, N, K < 2^31
//
// M = 0: OK, nothing launched. On any other device (or arch), the call is refused before it
// compiles anything. The kernel's tactic (tile, pipeline stages, raster group) is chosen per
// shape by a heuristic from (M, N, K, the device's SM count); docs/kernels-gemm.md.
// Devices, contexts and streams as for every op (kiln/ops.h).
//
// grouped_gemm: E independent products sharing N and K (the experts of a mixture-of-experts
// layer), d_e = a_e · b[e]ᵀ, the groups' rows given on the device (no host sync: graph-safe):
//
//   a         [T, K]     the rows of every group, concatenated (group e: rows m_indptr[e] ..
//                        m_indptr[e + 1] - 1; groups may be empty); dtype, strides and alignment
//                        as gemm's a
//   b         [E, N, K]  a's dtype, K-major, the experts at a uniform stride (viewable as
//                        [E * N, K]); 1 <= E <= 256
//   d         [T, N]     bf16, fp16 or fp32; as gemm's d (rows outside every group untouched)
//   m_indptr  [E + 1]    int32 on a's device, contiguous, non-decreasing from 0 to T; the kernel
//                        clamps each value into [0, T], so a bad table gives wrong rows but never
//                        writes outside d
//
// grouped_gemm_masked: the same with a [E, M_max, K] and d [E, M_max, N] (each viewable as
// [E * M_max, ...]) and masked_m [E] int32 (device): group e is its first masked_m[e] rows
// (clamped into [0, M_max]); the other rows of d are untouched. For CUDA-graph decode, where
// the counts change between replays and M_max does not.
//
// No bias or beta · c for the grouped ops. T = 0 (or M_max = 0): OK, nothing launched.
//
// fp8_gemm: block-scaled fp8 (DeepSeek-V3's recipe), fp32 accumulation:
//
//   d[i, j] = sum over K blocks kb of sa[i, kb] · sb[j / 128, kb] · sum_{l in kb} a[i, l] · b[j, l]
//
//   a         [..., K]   fp8_e4m3; rows as gemm's a, but 16-byte rows are 16 elements: K and the
//                        row stride multiples of 16
//   b         [N, K]     fp8_e4m3, K-major; row stride a multiple of 16; 16-byte aligned
//   a_scales  [..., ceil(K / 128)]  fp32, a's leading dims: one scale per row and 128 of K
//   b_scales  [ceil(N / 128), ceil(K / 128)]  fp32: one scale per 128 x 128 block of b
//   d         [..., N]   bf16 or fp32; as gemm's d
//   N         a multiple of 8; K a multiple of 16; M, N, K < 2^31; each scale tensor's rows
//             (padded rows allowed) span fewer than 2^31 elements
//
// The tensor cores add the products of one 128-wide block of K; the block's sum is then scaled
// and added into fp32 registers (docs/kernels-gemm.md: the error stays that of a bf16 GEMM on
// the dequantized data). Scales are read as given (no check for finite or positive values).
//
// grouped_fp8_gemm and grouped_fp8_gemm_masked: grouped_gemm and grouped_gemm_masked on
// block-scaled fp8 — a and b fp8_e4m3 as fp8_gemm's (K a multiple of 16), d bf16 or fp32, and
//   a_scales  fp32, a's leading dims and ceil(K / 128) last ([T, kb] or [E, M_max, kb]): one
//             scale per row of a and 128 of K
//   b_scales  [E, ceil(N / 128), ceil(K / 128)] fp32: one scale per 128 x 128 block of each
//             expert's weight
//
// The C functions below are the same ops for C callers: DLTensor in, kiln_status out.
#ifndef KILN_OPS_GEMM_H_
#define KILN_OPS_GEMM_H_

#include "kiln/c_abi.h"

#ifdef __cplusplus
#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::ops {

// d = a · bᵀ (+ bias) (+ beta · c), as described above.
KILN_API Status gemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView* bias = nullptr,
                     const TensorView* c = nullptr, double beta = 1.0, void* stream = nullptr);

// d = a_e · b[e]ᵀ per group e of rows m_indptr[e] .. m_indptr[e + 1] - 1, as described above.
KILN_API Status grouped_gemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& m_indptr,
                             void* stream = nullptr);

// d[e, :masked_m[e]] = a[e, :masked_m[e]] · b[e]ᵀ, as described above.
KILN_API Status grouped_gemm_masked(const TensorView& d, const TensorView& a, const TensorView& b,
                                    const TensorView& masked_m, void* stream = nullptr);

// d = the block-scaled product of fp8 a and b, as described above.
KILN_API Status fp8_gemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& a_scales,
                         const TensorView& b_scales, void* stream = nullptr);

// grouped_gemm on block-scaled fp8, as described above.
KILN_API Status grouped_fp8_gemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                 const TensorView& a_scales, const TensorView& b_scales, const TensorView& m_indptr,
                                 void* stream = nullptr);

// grouped_gemm_masked on block-scaled fp8, as described above.
KILN_API Status grouped_fp8_gemm_masked(const TensorView& d, const TensorView& a, const TensorView& b,
                                        const TensorView& a_scales, const TensorView& b_scales,
                                        const TensorView& masked_m, void* stream = nullptr);

}  // namespace kiln::ops

extern "C" {
#endif

/* d = a . b^T (+ bias) (+ beta * c). a [..., K] and b [N, K] bf16/fp16 (K-major, 16-byte
 * aligned, row strides multiples of 8), d [..., N] bf16/fp16/fp32; bias [N] (a's dtype) and
 * c (d's shape and dtype) may be NULL; beta 0: c is not read. N, K multiples of 8. sm_90a
 * devices only. stream: a CUstream / cudaStream_t, or NULL for the default stream. */
KILN_API kiln_status kiln_gemm(DLTensor* d, const DLTensor* a, const DLTensor* b, const DLTensor* bias,
                               const DLTensor* c, double beta, void* stream);

/* Grouped: d [T, N] = per group e, a[m_indptr[e] .. m_indptr[e + 1] - 1] . b[e]^T; a [T, K],
 * b [E, N, K] (a's dtype), m_indptr [E + 1] int32 on the device; E <= 256. As described above. */
KILN_API kiln_status kiln_grouped_gemm(DLTensor* d, const DLTensor* a, const DLTensor* b, const DLTensor* m_indptr,
                                       void* stream);

/* Grouped, masked: d [E, M_max, N] = per group e, its first masked_m[e] rows of a [E, M_max, K]
 * times b[e]^T; masked_m [E] int32 on the device. As described above. */
KILN_API kiln_status kiln_grouped_gemm_masked(DLTensor* d, const DLTensor* a, const DLTensor* b,
                                              const DLTensor* masked_m, void* stream);

/* Block-scaled fp8: a [..., K] and b [N, K] fp8_e4m3 (K-major, 16-byte aligned, row strides
 * multiples of 16), a_scales [..., ceil(K/128)] and b_scales [ceil(N/128), ceil(K/128)] fp32,
 * d [..., N] bf16/fp32. N a multiple of 8, K of 16. sm_90a devices only. As described above. */
KILN_API kiln_status kiln_fp8_gemm(DLTensor* d, const DLTensor* a, const DLTensor* b, const DLTensor* a_scales,
                                   const DLTensor* b_scales, void* stream);

/* Grouped, block-scaled fp8: a [T, K] and b [E, N, K] fp8_e4m3, a_scales [T, ceil(K/128)] and
 * b_scales [E, ceil(N/128), ceil(K/128)] fp32, m_indptr [E + 1] int32, d [T, N] bf16/fp32. */
KILN_API kiln_status kiln_grouped_fp8_gemm(DLTensor* d, const DLTensor* a, const DLTensor* b, const DLTensor* a_scales,
                                           const DLTensor* b_scales, const DLTensor* m_indptr, void* stream);

/* Grouped, masked, block-scaled fp8: a [E, M_max, K], a_scales [E, M_max, ceil(K/128)], masked_m
 * [E] int32, d [E, M_max, N]; b and b_scales as kiln_grouped_fp8_gemm's. */
KILN_API kiln_status kiln_grouped_fp8_gemm_masked(DLTensor* d, const DLTensor* a, const DLTensor* b,
                                                  const DLTensor* a_scales, const DLTensor* b_scales,
                                                  const DLTensor* masked_m, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_OPS_GEMM_H_ */
