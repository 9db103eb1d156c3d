// The arguments the attention plans (BatchDecodePlan, BatchPrefillPlan) share: the heads, head
// dim and dtype their kernels support, and the softmax scalars (sm_scale, soft cap, window) as
// the kernels take them. Pure; each failure is INVALID_ARGUMENT "<argument>: ..." (callers add
// the API's name).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// fp16/bf16; head_dim 64, 128, 256; 1..8192 kv heads; num_qo_heads a multiple of them by a
// group of 1, 2, 4 or 8.
Status CheckAttentionHeads(int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim, DType dtype);

struct AttentionScalars {
  double sm_scale = 0;    // resolved: 1 / sqrt(head_dim) for 0
  float logit_scale = 0;  // soft cap off: sm_scale * log2(e); on: sm_scale / cap
  float cap_scale = 0;    // soft cap on: cap * log2(e); off: 0
  int32_t window_left = -1;
};
// sm_scale 0 or finite > 0; logits_soft_cap 0 or finite > 0; window_left >= -1 (clamped to
// 2^31-1); the products representable as positive finite floats.
StatusOr<AttentionScalars> CheckAttentionScalars(double sm_scale, double logits_soft_cap, int64_t window_left,
                                                 int64_t head_dim);

// The dtype of a plan made through the C ABI: kDLFloat 16 (fp16) or kDLBfloat 16 (bf16); any
// other is INVALID_ARGUMENT "<api>: dtype: ... is not supported; supported: ...".
StatusOr<DType> PlanDTypeFromDL(DLDataType t, const char* api);

// A plan-creation failure of the C++ API as the C function reports it: a message that starts
// with "<cpp_api>: " starts with "<c_api>: " instead; the code is kept.
Status PlanStatusForC(const Status& status, const char* cpp_api, const char* c_api);

}  // namespace kiln::client
