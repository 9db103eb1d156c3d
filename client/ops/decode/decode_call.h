// The arguments of one batch_decode or append_paged_kv call, validated and turned into the
// kernel parameter structs (kiln/decode/decode_contract.h) and the specialization they need. Pure:
// no driver call, so every check runs, and is tested, without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "client/ops/decode/decode_plan.h"
#include "kiln/decode/decode_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

struct BatchDecodeCall {
  const char* api = "";
  const ops::BatchDecodePlan::State* plan = nullptr;  // the caller's plan outlives the call
  int device = 0;
  decode::KilnBatchDecodeParams params = {};
};

struct AppendPagedKvCall {
  const char* api = "";
  DType dtype = DType::kBFloat16;
  int device = 0;
  int64_t head_dim = 0;
  int vec = 1;
  decode::KilnAppendPagedKvParams params = {};
};

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
// `api` must outlive the call (a string literal).
StatusOr<BatchDecodeCall> CheckBatchDecode(const ops::BatchDecodePlan& plan, const TensorView& out,
                                           const TensorView* lse, const TensorView& q, const TensorView& k_cache,
                                           const TensorView& v_cache, const TensorView& kv_indptr,
                                           const TensorView& kv_indices, const TensorView& kv_last_page_len,
                                           void* workspace, size_t workspace_bytes, const char* api);

StatusOr<AppendPagedKvCall> CheckAppendPagedKv(const TensorView& k_cache, const TensorView& v_cache,
                                               const TensorView& k, const TensorView& v,
                                               const TensorView& batch_indices, const TensorView& positions,
                                               const TensorView& kv_indptr, const TensorView& kv_indices,
                                               const TensorView& kv_last_page_len, const char* api);

}  // namespace kiln::client
