// The inside of kiln::ops::BatchDecodePlan (kiln/ops/decode.h): its validated arguments, the
// kernel's scalars and the split schedule; and PlanBatchDecode, the pure part of
// BatchDecodePlan::Create (everything but asking the driver for the SM count), which the CPU
// tests call with a chosen SM count.
#pragma once

#include <cstdint>
#include <string>

#include "client/ops/decode/decode_schedule.h"
#include "kiln/ops/decode.h"

namespace kiln::ops {

struct BatchDecodePlan::State {
  int64_t batch = 0;
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t page_size = 0;
  int64_t group = 0;
  DType dtype = DType::kBFloat16;
  int device = 0;
  DecodeOptions options;
  // What the kernel takes (kiln/decode/decode_contract.h).
  float logit_scale = 0;  // soft cap off: sm_scale * log2(e); on: sm_scale / cap
  float cap_scale = 0;    // soft cap on: cap * log2(e)
  int32_t window_left = -1;
  int64_t indptr_end = 0;  // kv_indptr[batch]: kv_indices needs at least this many entries
  client::DecodeSchedule schedule;
  size_t workspace_bytes = 0;
  size_t partial_lse_offset = 0;  // bytes into the workspace
};

}  // namespace kiln::ops

namespace kiln::client {

struct DecodePlanAccess {
  static const ops::BatchDecodePlan::State* Get(const ops::BatchDecodePlan& plan) { return plan.state_.get(); }
  static ops::BatchDecodePlan Make(ops::BatchDecodePlan::State state);
};

// Everything BatchDecodePlan::Create checks and computes, for `num_sms` SMs on `device`.
// INVALID_ARGUMENT "<api>: <argument>: ..." on the first bad argument.
StatusOr<ops::BatchDecodePlan> PlanBatchDecode(const int32_t* kv_indptr_host, const int32_t* kv_last_page_len_host,
                                               int64_t batch_size, int64_t num_qo_heads, int64_t num_kv_heads,
                                               int64_t head_dim, int64_t page_size, DType dtype,
                                               const ops::DecodeOptions& options, int device, int num_sms,
                                               const char* api);

// The checks of Create that need no page table (shared with the C ABI's early checks).
Status CheckDecodeShape(int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim, int64_t page_size, DType dtype);

}  // namespace kiln::client
