// kiln::ops paged KV cache and batch decode attention: append_paged_kv writes new tokens into
// the cache; BatchDecodePlan (host, once per step) + batch_decode (every layer) attend one
// query token per request over it. Part of kiln/ops.h (devices, contexts and streams as
// described there). docs/kernels-decode.md has the kernel design and limits.
//
// The paged KV cache (FlashInfer's layout): k_cache and v_cache are each
//   [num_pages, page_size, num_kv_heads, head_dim]   fp16 or bf16
// dense inside a page (strides [page_stride, num_kv_heads * head_dim, head_dim, 1]); the page
// stride may be larger (K and V pages interleaved in one pool), a multiple of 8 elements, and
// both data pointers are 16-byte aligned. A batch of B requests is a page table of int32
// tensors: kv_indptr [B + 1], kv_indices [kv_indptr[B]], kv_last_page_len [B]. Request b owns
// the pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]) in order (at least one), its last page
// holds kv_last_page_len[b] tokens (1 .. page_size), so its KV length is
//   kv_len[b] = (kv_indptr[b+1] - kv_indptr[b] - 1) * page_size + kv_last_page_len[b]
// and position p lives in page kv_indices[kv_indptr[b] + p / page_size], slot p % page_size.
//
// Supported: head_dim 64, 128, 256; group = num_qo_heads / num_kv_heads in {1, 2, 4, 8};
// page_size a power of two 1 .. 256; fp16 and bf16 (sm_80 and later). Anything else is
// INVALID_ARGUMENT naming the argument, the value and what is allowed.
//
// The C functions below are the same ops for C callers: DLTensor in, kiln_status out.
#ifndef KILN_OPS_DECODE_H_
#define KILN_OPS_DECODE_H_

#include "kiln/c_abi.h"

#ifdef __cplusplus
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {
struct DecodePlanAccess;
}

namespace kiln::ops {

struct DecodeOptions {
  double sm_scale = 0;         // logits = sm_scale * q.k; 0: 1 / sqrt(head_dim); else finite, > 0
  double logits_soft_cap = 0;  // > 0: logits = cap * tanh(logits / cap) before the softmax; 0: off
  int64_t window_left = -1;    // >= 0: attend only the last window_left + 1 positions; -1: all
};

// The schedule of one decode step, made on the host from the host copies of kv_indptr and
// kv_last_page_len, and reusable for every layer of the step (same page table, same shapes).
//
// Split-KV (flash-decoding): when the batch alone has too few (request, kv head) pairs to fill
// the GPU (two blocks per SM), or one request is much longer than the balanced share of a
// block, requests are cut into chunks of chunk_pages() pages (the rule is in
// docs/kernels-decode.md); a block attends one chunk and a merge kernel combines the chunks by
// their log-sum-exp. A batch of many short requests is not split. Splitting needs a device
// workspace of workspace_bytes() (0 when not split). Batches of more than 512 requests are
// never split.
class KILN_API BatchDecodePlan {
 public:
  // kv_indptr_host [batch_size + 1] and kv_last_page_len_host [batch_size] are host arrays,
  // read during the call only. device: the CUDA ordinal whose SM count sizes the split; -1:
  // the current context's device (device 0 when none is current). Checks every argument
  // before it touches the driver.
  static StatusOr<BatchDecodePlan> Create(const int32_t* kv_indptr_host, const int32_t* kv_last_page_len_host,
                                          int64_t batch_size, int64_t num_qo_heads, int64_t num_kv_heads,
                                          int64_t head_dim, int64_t page_size, DType dtype,
                                          const DecodeOptions& options = {}, int device = -1);

  size_t workspace_bytes() const;  // device bytes batch_decode needs; 0 when not split
  bool split() const;              // whether any request is cut into chunks
  int64_t num_items() const;       // work items (request chunks); the grid is items x kv heads
  int64_t chunk_pages() const;     // pages per chunk when split; 0 otherwise
  int64_t batch_size() const;
  int64_t num_qo_heads() const;
  int64_t num_kv_heads() const;
  int64_t head_dim() const;
  int64_t page_size() const;
  DType dtype() const;
  int device() const;
  const DecodeOptions& options() const;  // as given (sm_scale 0 stays 0)
  std::string Describe() const;          // "...; batch 1, ... split into 33 items of up to 3072 positions ..."

  struct State;  // opaque: defined inside the library

 private:
  friend struct client::DecodePlanAccess;
  BatchDecodePlan() = default;
  std::shared_ptr<const State> state_;  // immutable: copies share it
};

// Writes each new token's k and v into its slot: for token i of request b = batch_indices[i]
// at position pos = positions[i] (0-based, within that request's KV sequence),
//   k_cache[kv_indices[kv_indptr[b] + pos / page_size], pos % page_size] = k[i]   (and v)
// The page table must already cover the new tokens (pos < kv_len[b]); tokens it does not
// cover (b outside [0, B), pos outside [0, kv_len[b]), a page id outside the cache) are read
// on the GPU and skipped, never written out of bounds.
//
//   k_cache, v_cache  the cache (above); written in place
//   k, v              [nnz, num_kv_heads, head_dim], the caches' dtype; head_dim has stride 1,
//                     token and head strides are free (views into a fused qkv buffer work)
//   batch_indices, positions  int32 [nnz], contiguous
//   kv_indptr, kv_indices, kv_last_page_len  the page table (int32, contiguous)
// nnz == 0 returns OK without launching. Distinct tokens must not share a slot.
KILN_API Status append_paged_kv(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k,
                                const TensorView& v, const TensorView& batch_indices, const TensorView& positions,
                                const TensorView& kv_indptr, const TensorView& kv_indices,
                                const TensorView& kv_last_page_len, void* stream = nullptr);

// For every request b and query head h (kv head h / group), over the positions j of its KV
// (only the last window_left + 1 with a window):
//   s_j = sm_scale * q[b, h] . k_j     (or cap * tanh(s_j / cap) with a soft cap)
//   out[b, h] = sum_j softmax(s)_j v_j;   lse[b, h] = ln(sum_j exp(s_j))   (natural log)
// in fp32 with one rounding to the dtype (softmax weights are rounded to the dtype for the
// tensor-core product with V).
//
//   plan      from BatchDecodePlan::Create with the same page table, heads, head dim, page size
//             and dtype
//   out       [B, num_qo_heads, head_dim], q's dtype; written; must not overlap any input
//   lse       nullable; fp32 [B, num_qo_heads], heads contiguous; written
//   q         [B, num_qo_heads, head_dim], plan's dtype; head_dim has stride 1; batch and head
//             strides are free but even (q and out are read and written as element pairs), and
//             the pointers 4-byte aligned
//   k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len  the cache and page table; the
//             device page table must equal the host copy the plan was made from
//   workspace device memory of at least plan.workspace_bytes(), 16-byte aligned (may be null
//             when that is 0); used by this call only, on `stream`
KILN_API Status batch_decode(const BatchDecodePlan& plan, const TensorView& out, const TensorView* lse,
                             const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                             const TensorView& kv_indptr, const TensorView& kv_indices,
                             const TensorView& kv_last_page_len, void* workspace, size_t workspace_bytes,
                             void* stream = nullptr);

}  // namespace kiln::ops

extern "C" {
#endif

/* ---- Paged KV cache and batch decode attention (kiln/ops/decode.h, docs/kernels-decode.md) ----
 * k_cache, v_cache: [num_pages, page_size, num_kv_heads, head_dim] fp16/bf16, dense inside a
 * page (page stride free, a multiple of 8 elements), 16-byte aligned. The page table (int32,
 * contiguous): kv_indptr [B + 1], kv_indices, kv_last_page_len [B]; request b owns the pages
 * kv_indices[kv_indptr[b] .. kv_indptr[b+1]) and holds (pages - 1) * page_size +
 * kv_last_page_len[b] positions. head_dim 64/128/256; num_qo_heads / num_kv_heads 1/2/4/8;
 * page_size a power of two up to 256. */

/* k_cache[page, slot] = k[i], v_cache[page, slot] = v[i] for each token i of k, v
 * [nnz, num_kv_heads, head_dim], with page = kv_indices[kv_indptr[b] + pos / page_size],
 * slot = pos % page_size, b = batch_indices[i], pos = positions[i] (int32 [nnz]). Tokens the
 * page table does not cover are skipped. nnz == 0 is OK without a launch. */
KILN_API kiln_status kiln_append_paged_kv(DLTensor* k_cache, DLTensor* v_cache, const DLTensor* k, const DLTensor* v,
                                          const DLTensor* batch_indices, const DLTensor* positions,
                                          const DLTensor* kv_indptr, const DLTensor* kv_indices,
                                          const DLTensor* kv_last_page_len, void* stream);

typedef struct kiln_batch_decode_plan kiln_batch_decode_plan; /* opaque */

/* The schedule of one decode step (split-KV or not) from the host copies of kv_indptr
 * [batch_size + 1] and kv_last_page_len [batch_size]; reusable for every layer of the step.
 * dtype: kDLFloat 16 or kDLBfloat 16. sm_scale 0: 1/sqrt(head_dim); logits_soft_cap 0: off,
 * else logits = cap * tanh(logits / cap); window_left -1: off, else only the last
 * window_left + 1 positions. device -1: the current context's. batch_size 0 is refused. On
 * success *plan is set; free it with kiln_batch_decode_plan_destroy. */
KILN_API kiln_status kiln_batch_decode_plan_create(const int32_t* kv_indptr_host, const int32_t* kv_last_page_len_host,
                                                   int64_t batch_size, int64_t num_qo_heads, int64_t num_kv_heads,
                                                   int64_t head_dim, int64_t page_size, DLDataType dtype,
                                                   double sm_scale, double logits_soft_cap, int64_t window_left,
                                                   int device, kiln_batch_decode_plan** plan);
/* Device workspace bytes kiln_batch_decode needs with this plan (0: not split; 0 for NULL). */
KILN_API size_t kiln_batch_decode_plan_workspace_bytes(const kiln_batch_decode_plan* plan);
/* NULL is ignored. */
KILN_API void kiln_batch_decode_plan_destroy(kiln_batch_decode_plan* plan);

/* out [B, num_qo_heads, head_dim] = softmax(logits) V per request and query head, for q of
 * that shape (the plan's dtype; batch and head strides even); lse (NULL: not written) fp32
 * [B, num_qo_heads] gets ln(sum exp(logits)). workspace: device memory of at least
 * kiln_batch_decode_plan_workspace_bytes(plan), 16-byte aligned (NULL when that is 0). */
KILN_API kiln_status kiln_batch_decode(const kiln_batch_decode_plan* plan, DLTensor* out, DLTensor* lse,
                                       const DLTensor* q, const DLTensor* k_cache, const DLTensor* v_cache,
                                       const DLTensor* kv_indptr, const DLTensor* kv_indices,
                                       const DLTensor* kv_last_page_len, void* workspace, size_t workspace_bytes,
                                       void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_OPS_DECODE_H_ */
