// The inside of kiln::ops::BatchPrefillPlan (kiln/ops/prefill.h): its validated arguments, the
// kernel's scalars and the schedule; and PlanBatchPrefill, the pure part of Create* (everything
// but asking the driver for the SM count), which the CPU tests call with a chosen SM count.
#pragma once

#include <cstdint>
#include <string>

#include "client/ops/prefill/prefill_schedule.h"
#include "kiln/ops/prefill.h"

namespace kiln::ops {

struct BatchPrefillPlan::State {
  bool paged = false;
  int64_t batch = 0;
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t page_size = 0;  // paged only
  int64_t group = 0;
  DType dtype = DType::kBFloat16;
  int device = 0;
  PrefillOptions options;
  // What the kernel takes (kiln/prefill/prefill_contract.h).
  float logit_scale = 0;  // soft cap off: sm_scale * log2(e); on: sm_scale / cap
  float cap_scale = 0;    // soft cap on: cap * log2(e)
  int32_t window_left = -1;
  int64_t total_q = 0;   // qo_indptr[batch]
  int64_t kv_end = 0;    // kv_indptr[batch]: ragged, rows of k and v; paged, entries of kv_indices
  int64_t total_kv = 0;  // KV positions of the batch (the sum of kv_len)
  int64_t max_q_len = 0;
  int64_t max_kv_len = 0;
  client::PrefillSchedule schedule;
  size_t workspace_bytes = 0;
  size_t partial_lse_offset = 0;  // bytes into the workspace
  int64_t partial_rows = 0;
};

}  // namespace kiln::ops

namespace kiln::client {

struct PrefillPlanAccess {
  static const ops::BatchPrefillPlan::State* Get(const ops::BatchPrefillPlan& plan) { return plan.state_.get(); }
  static ops::BatchPrefillPlan Make(ops::BatchPrefillPlan::State state);
};

// The batch's shape as the plan is asked for it. kv_last_page_len_host and page_size only when
// paged.
struct PrefillPlanRequest {
  const int32_t* qo_indptr_host = nullptr;
  const int32_t* kv_indptr_host = nullptr;
  const int32_t* kv_last_page_len_host = nullptr;
  bool paged = false;
  int64_t batch_size = 0;
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t page_size = 0;
  DType dtype = DType::kBFloat16;
  ops::PrefillOptions options;
};

// Everything Create* checks and computes, for `num_sms` SMs on `device`.
// INVALID_ARGUMENT "<api>: <argument>: ..." on the first bad argument.
StatusOr<ops::BatchPrefillPlan> PlanBatchPrefill(const PrefillPlanRequest& request, int device, int num_sms,
                                                 const char* api);

// The checks that need no index array (shared with the C ABI's early checks).
Status CheckPrefillShape(int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim, DType dtype);

}  // namespace kiln::client
