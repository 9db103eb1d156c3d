// kiln::ops prefill attention: a batch's queries over their keys and values, ragged
// (batch_prefill_ragged: K/V of the requests concatenated) or in the paged KV cache of
// kiln/ops/decode.h (batch_prefill_paged: chunked prefill, speculative verification), with a
// host plan (BatchPrefillPlan, once per batch) and a run (every layer). Part of kiln/ops.h
// (devices, contexts and streams as described there). docs/kernels-prefill.md has the kernel
// design and limits.
//
// A batch of B requests: request b has q_len[b] = qo_indptr[b+1] - qo_indptr[b] queries (0 is
// allowed) at rows qo_indptr[b] .. of q and out, and kv_len[b] keys/values: ragged,
// kv_indptr[b+1] - kv_indptr[b] rows of k and v from kv_indptr[b]; paged, the page table of
// kiln/ops/decode.h (kv_indptr in pages, kv_indices, kv_last_page_len; a request may own no
// page, then kv_len is 0).
//
// For query i of request b and query head h (kv head h / group, group = num_qo_heads /
// num_kv_heads), its own position is p = kv_len - q_len + i (queries are the last q_len
// positions), and it attends the positions j of its request's KV with
//   j <= p                     when causal
//   j >= p - window_left       when window_left >= 0
//   s_j = sm_scale * q . k_j   (or cap * tanh(s_j / cap) with a soft cap)
//   out[i, h] = sum_j softmax(s)_j v_j;   lse[i, h] = ln(sum_j exp(s_j))   (natural log)
// in fp32 with one rounding to the dtype (softmax weights rounded to the dtype for the
// tensor-core product with V, as FlashAttention does). A query that sees no position gets
// out = 0 and lse = -inf.
//
// Supported: head_dim 64, 128, 256; group 1, 2, 4, 8; fp16 and bf16; sm_90a. Anything else is
// INVALID_ARGUMENT (FAILED_PRECONDITION for another GPU) naming what is allowed.
#ifndef KILN_OPS_PREFILL_H_
#define KILN_OPS_PREFILL_H_

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
struct PrefillPlanAccess;
}

namespace kiln::ops {

struct PrefillOptions {
  bool causal = true;          // each query sees positions up to its own (aligned to the end)
  double sm_scale = 0;         // logits = sm_scale * q.k; 0: 1 / sqrt(head_dim); else finite, > 0
  double logits_soft_cap = 0;  // > 0: logits = cap * tanh(logits / cap) before the softmax; 0: off
  int64_t window_left = -1;    // >= 0: a query at position p sees only [p - window_left, ...]; -1: all
};

// The schedule of one batch, made on the host from the host copies of the index arrays and
// reusable for every layer (same lengths, heads, head dim and options). It cuts the queries
// into tiles of 64 rows (query positions x the query heads of one kv head) and, when the tiles
// alone are too few to fill the GPU and the KV is long (few queries over a long context, as in
// speculative verification), the KV into chunks merged by log-sum-exp; splitting needs a device
// workspace of workspace_bytes() (0 when not split). Batches of more than 512 requests are
// never split. The run does no host work that depends on the data (CUDA-graph safe).
class KILN_API BatchPrefillPlan {
 public:
  // qo_indptr_host, kv_indptr_host [batch_size + 1] (tokens), host arrays read during the call.
  // device: the CUDA ordinal whose SM count sizes the split; -1: the current context's device
  // (device 0 when none is current). Every argument is checked before the driver is touched.
  static StatusOr<BatchPrefillPlan> CreateRagged(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                                 int64_t batch_size, int64_t num_qo_heads, int64_t num_kv_heads,
                                                 int64_t head_dim, DType dtype, const PrefillOptions& options = {},
                                                 int device = -1);
  // The paged form: kv_indptr_host [batch_size + 1] in pages, kv_last_page_len_host [batch_size]
  // (1 .. page_size for a request with pages; ignored for one without).
  static StatusOr<BatchPrefillPlan> CreatePaged(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                                const int32_t* kv_last_page_len_host, int64_t batch_size,
                                                int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim,
                                                int64_t page_size, DType dtype, const PrefillOptions& options = {},
                                                int device = -1);

  size_t workspace_bytes() const;  // device bytes a run needs; 0 when not split
  bool paged() const;
  bool split() const;            // whether any request's KV is cut into chunks
  int64_t num_items() const;     // blocks per kv head (row tiles x chunks)
  int64_t chunk_tokens() const;  // KV positions per chunk when split; 0 otherwise
  int64_t batch_size() const;
  int64_t total_q() const;  // qo_indptr[batch_size]: q and out have at least these rows
  int64_t num_qo_heads() const;
  int64_t num_kv_heads() const;
  int64_t head_dim() const;
  int64_t page_size() const;  // 0 for a ragged plan
  DType dtype() const;
  int device() const;
  const PrefillOptions& options() const;  // as given (sm_scale 0 stays 0)
  std::string Describe() const;

  struct State;  // opaque: defined inside the library

 private:
  friend struct client::PrefillPlanAccess;
  BatchPrefillPlan() = default;
  std::shared_ptr<const State> state_;  // immutable: copies share it
};

// Attention of a ragged batch (above) with a ragged plan.
//   out      [total_q, num_qo_heads, head_dim], q's dtype; written; overlaps no input
//   lse      nullable; fp32 [total_q, num_qo_heads], heads contiguous; written
//   q        [total_q, num_qo_heads, head_dim] (total_q >= the plan's), the plan's dtype
//   k, v     [total_kv, num_kv_heads, head_dim] (total_kv >= the plan's kv_indptr[batch])
//   qo_indptr, kv_indptr  int32 [batch_size + 1], contiguous, equal to the plan's host copies
//   workspace device memory of at least plan.workspace_bytes(), 16-byte aligned (null when 0)
// q, out, k and v: head_dim contiguous, token and head strides multiples of 8 elements, data
// 16-byte aligned (views into a fused qkv buffer work).
KILN_API Status batch_prefill_ragged(const BatchPrefillPlan& plan, const TensorView& out, const TensorView* lse,
                                     const TensorView& q, const TensorView& k, const TensorView& v,
                                     const TensorView& qo_indptr, const TensorView& kv_indptr, void* workspace,
                                     size_t workspace_bytes, void* stream = nullptr);

// Attention over the paged KV cache with a paged plan: k_cache, v_cache and the page table as
// in kiln/ops/decode.h (the device table equal to the plan's host copy); the rest as above.
KILN_API Status batch_prefill_paged(const BatchPrefillPlan& plan, const TensorView& out, const TensorView* lse,
                                    const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                                    const TensorView& qo_indptr, const TensorView& kv_indptr,
                                    const TensorView& kv_indices, const TensorView& kv_last_page_len, void* workspace,
                                    size_t workspace_bytes, void* stream = nullptr);

}  // namespace kiln::ops

extern "C" {
#endif

/* ---- Prefill attention (kiln/ops/prefill.h, docs/kernels-prefill.md) ----
 * Request b: queries qo_indptr[b] .. qo_indptr[b+1] of q/out [total_q, num_qo_heads, head_dim];
 * keys/values ragged (rows kv_indptr[b] .. of k, v [total_kv, num_kv_heads, head_dim]) or paged
 * (the page table of kiln/ops/decode.h). Causal aligned to the end. head_dim 64/128/256; group
 * 1/2/4/8; fp16/bf16; sm_90a. */

typedef struct kiln_batch_prefill_plan kiln_batch_prefill_plan; /* opaque */

/* dtype: kDLFloat 16 or kDLBfloat 16. causal 0/1; sm_scale 0: 1/sqrt(head_dim);
 * logits_soft_cap 0: off; window_left -1: off. device -1: the current context's. On success
 * *plan is set; free it with kiln_batch_prefill_plan_destroy. */
KILN_API kiln_status kiln_batch_prefill_plan_create_ragged(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                                           int64_t batch_size, int64_t num_qo_heads,
                                                           int64_t num_kv_heads, int64_t head_dim, DLDataType dtype,
                                                           int causal, double sm_scale, double logits_soft_cap,
                                                           int64_t window_left, int device,
                                                           kiln_batch_prefill_plan** plan);
/* kv_indptr_host in pages; kv_last_page_len_host [batch_size]. */
KILN_API kiln_status kiln_batch_prefill_plan_create_paged(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                                          const int32_t* kv_last_page_len_host, int64_t batch_size,
                                                          int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim,
                                                          int64_t page_size, DLDataType dtype, int causal,
                                                          double sm_scale, double logits_soft_cap, int64_t window_left,
                                                          int device, kiln_batch_prefill_plan** plan);
/* Device workspace bytes a run needs with this plan (0: not split; 0 for NULL). */
KILN_API size_t kiln_batch_prefill_plan_workspace_bytes(const kiln_batch_prefill_plan* plan);
/* NULL is ignored. */
KILN_API void kiln_batch_prefill_plan_destroy(kiln_batch_prefill_plan* plan);

/* lse may be NULL (not written); workspace NULL when the plan needs 0 bytes. */
KILN_API kiln_status kiln_batch_prefill_ragged(const kiln_batch_prefill_plan* plan, DLTensor* out, DLTensor* lse,
                                               const DLTensor* q, const DLTensor* k, const DLTensor* v,
                                               const DLTensor* qo_indptr, const DLTensor* kv_indptr, void* workspace,
                                               size_t workspace_bytes, void* stream);
KILN_API kiln_status kiln_batch_prefill_paged(const kiln_batch_prefill_plan* plan, DLTensor* out, DLTensor* lse,
                                              const DLTensor* q, const DLTensor* k_cache, const DLTensor* v_cache,
                                              const DLTensor* qo_indptr, const DLTensor* kv_indptr,
                                              const DLTensor* kv_indices, const DLTensor* kv_last_page_len,
                                              void* workspace, size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_OPS_PREFILL_H_ */
