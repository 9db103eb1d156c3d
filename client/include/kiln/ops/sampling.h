// kiln::ops sampling: one token per row of a probability matrix, on the GPU.
//
//   probs    [B, V]  fp32, CUDA; the last dim has stride 1, rows may be padded; 1 <= V <= 1048575.
//                    Non-negative values, normalized or not (each op renormalizes over the tokens
//                    it keeps); zeros are never drawn; negatives and NaN count as 0. A row with
//                    no positive value gives 0.
//   samples  [B]     int32 or int64, contiguous, written (must not overlap the inputs)
//
// The draw is deterministic: the same (probs, parameters, seed, offset) gives the same samples,
// bit for bit, on the same GPU architecture; another offset (or seed) gives independent draws.
// Row b's randomness is Philox4x32-10 with key = seed and counter = (token / 4, b, offset):
// advance `offset` (e.g. by 1 per step) to draw again. The allowed set is exact (thresholds
// computed on the values' bits; masses summed exactly, then in fp64):
//
//   top_k_sampling        tokens with value >= the k-th largest value of the row. Ties at that
//                         value are all kept (so more than k tokens may take part).
//                         k = 0 or k >= V: no truncation. k < 0 is refused.
//   top_p_sampling        tokens with value v such that the sum of the values > v is < p * (row
//                         sum): the smallest set of the largest values holding a p share of the
//                         mass, ties at its edge kept. 0 < p <= 1; p = 1: no truncation.
//   top_k_top_p_sampling  top-k, then top-p over the top-k set renormalized:
//                         (sum of values > v) < p * (sum of the top-k set).
//   min_p_sampling        tokens with value >= fp32(min_p * (row max)); 0 <= min_p <= 1.
//   argmax                the index of the largest value (any fp32; NaN counts as largest, as
//                         torch.argmax); ties go to the lowest index.
//
// Per-request parameters: PerRequestInt / PerRequestFloat hold either a device tensor [B]
// (int32 k, fp32 p / min_p, contiguous, on probs' device) or one scalar for every row.
// Scalars are checked here; tensor entries cannot be (they are in device memory) and are read
// as: k <= 0 or k >= V no top-k; p >= 1 no top-p, p <= 0 or NaN keeps only the row's largest
// value; min_p clamped to [0, 1] (NaN: 0).
//
// Cost: one block of 1024 threads per row. argmax reads the row once; min_p twice; top_k /
// top_p / top_k_top_p twice in the common case (more when the ~12.5%-wide value band around the
// threshold holds more than 4096 tokens: at most 4 reads, 8 for top_k_top_p); a sampler with
// no truncation in effect once. docs/kernels-sampling.md.
//
// B = 0: OK, nothing launched. Devices, contexts and streams as for every op (kiln/ops.h).
//
// The C functions below are the same ops for C callers: DLTensor in, kiln_status out.
#ifndef KILN_OPS_SAMPLING_H_
#define KILN_OPS_SAMPLING_H_

#include "kiln/c_abi.h"

#ifdef __cplusplus
#include <cstdint>

#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::ops {

struct PerRequestInt {
  const TensorView* values = nullptr;  // [B] int32 on the device when set, else `scalar` for every row
  int64_t scalar = 0;
};

struct PerRequestFloat {
  const TensorView* values = nullptr;  // [B] fp32 on the device when set, else `scalar` for every row
  double scalar = 0;
};

struct SamplingSeed {
  uint64_t seed = 0;    // Philox key
  uint64_t offset = 0;  // Philox counter words 2..3: a new offset gives a new, independent draw
};

KILN_API Status top_k_sampling(const TensorView& samples, const TensorView& probs, PerRequestInt top_k,
                               SamplingSeed seed, void* stream = nullptr);
KILN_API Status top_p_sampling(const TensorView& samples, const TensorView& probs, PerRequestFloat top_p,
                               SamplingSeed seed, void* stream = nullptr);
KILN_API Status top_k_top_p_sampling(const TensorView& samples, const TensorView& probs, PerRequestInt top_k,
                                     PerRequestFloat top_p, SamplingSeed seed, void* stream = nullptr);
KILN_API Status min_p_sampling(const TensorView& samples, const TensorView& probs, PerRequestFloat min_p,
                               SamplingSeed seed, void* stream = nullptr);
KILN_API Status argmax(const TensorView& samples, const TensorView& probs, void* stream = nullptr);

}  // namespace kiln::ops

extern "C" {
#endif

/* ---- Sampling (kiln/ops/sampling.h, docs/kernels-sampling.md) ----
 * One token per row: probs [B, V] fp32 (last dim stride 1, rows may be padded, 1 <= V <=
 * 1048575; non-negative, normalized or not; negatives and NaN count as 0), samples [B] int32
 * or int64, contiguous, not overlapping the inputs. Per-request parameters: a DLTensor [B]
 * (int32 top_k, fp32 top_p / min_p, contiguous, on probs' device), or NULL and the scalar for
 * every row. Deterministic: Philox4x32-10 with key seed and counter (token / 4, row, offset);
 * the same arguments give the same samples. Exact allowed sets, ties at a threshold kept:
 *   kiln_top_k_sampling        value >= the k-th largest; top_k_scalar >= 0, 0: no top-k
 *   kiln_top_p_sampling        (sum of values > v) < p * (row sum); 0 < top_p_scalar <= 1
 *   kiln_top_k_top_p_sampling  top-k, then top-p over the renormalized top-k set
 *   kiln_min_p_sampling        value >= fp32(min_p * row max); 0 <= min_p_scalar <= 1
 *   kiln_argmax                the largest value (NaN largest); ties: the lowest index
 * Tensor entries are read as: k <= 0 or >= V no top-k; p >= 1 no top-p, p <= 0 keeps the
 * largest value; min_p clamped to [0, 1]. B = 0: KILN_OK without a launch. */
KILN_API kiln_status kiln_top_k_sampling(DLTensor* samples, const DLTensor* probs,
                                         const DLTensor* top_k /* NULL: top_k_scalar */, int64_t top_k_scalar,
                                         uint64_t seed, uint64_t offset, void* stream);
KILN_API kiln_status kiln_top_p_sampling(DLTensor* samples, const DLTensor* probs,
                                         const DLTensor* top_p /* NULL: top_p_scalar */, double top_p_scalar,
                                         uint64_t seed, uint64_t offset, void* stream);
KILN_API kiln_status kiln_top_k_top_p_sampling(DLTensor* samples, const DLTensor* probs, const DLTensor* top_k,
                                               int64_t top_k_scalar, const DLTensor* top_p, double top_p_scalar,
                                               uint64_t seed, uint64_t offset, void* stream);
KILN_API kiln_status kiln_min_p_sampling(DLTensor* samples, const DLTensor* probs,
                                         const DLTensor* min_p /* NULL: min_p_scalar */, double min_p_scalar,
                                         uint64_t seed, uint64_t offset, void* stream);
KILN_API kiln_status kiln_argmax(DLTensor* samples, const DLTensor* probs, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_OPS_SAMPLING_H_ */
