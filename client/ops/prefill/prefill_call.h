// The arguments of one batch_prefill_ragged or batch_prefill_paged call, validated against the
// plan and turned into the kernel parameter struct (kiln/prefill/prefill_contract.h). Pure: no
// driver call, so every check runs, and is tested, without a GPU.
#pragma once

#include <cstddef>

#include "client/ops/prefill/prefill_plan.h"
#include "kiln/prefill/prefill_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

struct BatchPrefillCall {
  const char* api = "";
  const ops::BatchPrefillPlan::State* plan = nullptr;  // the caller's plan outlives the call
  prefill::KilnBatchPrefillParams params = {};
};

// The K/V side of a call: ragged k and v, or the paged caches and their page table.
struct PrefillKv {
  const TensorView* k = nullptr;  // ragged k, or k_cache
  const TensorView* v = nullptr;
  const TensorView* kv_indptr = nullptr;
  const TensorView* kv_indices = nullptr;        // paged only
  const TensorView* kv_last_page_len = nullptr;  // paged only
};

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem (a
// ragged plan given to the paged op, or the reverse, included). `api` must outlive the call.
StatusOr<BatchPrefillCall> CheckBatchPrefill(const ops::BatchPrefillPlan& plan, bool paged, const TensorView& out,
                                             const TensorView* lse, const TensorView& q, const TensorView& qo_indptr,
                                             const PrefillKv& kv, void* workspace, size_t workspace_bytes,
                                             const char* api);

}  // namespace kiln::client
