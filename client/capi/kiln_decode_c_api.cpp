// The C ABI of the decode family (kiln/kiln.h, "Paged KV cache and batch decode"): an opaque
// kiln_batch_decode_plan around a kiln::ops::BatchDecodePlan, DLTensor arguments, kiln_status
// and kiln_last_error out. No exception crosses it.
#include <string>

#include "client/capi/c_status.h"
#include "client/capi/dlpack_tensor.h"
#include "client/ops/decode_ops.h"
#include "kiln/kiln.h"
#include "kiln/ops/decode.h"

struct kiln_batch_decode_plan {
  kiln::ops::BatchDecodePlan plan;
};

namespace {

using kiln::Status;
using kiln::StatusCode;
using kiln::StatusOr;
using kiln::TensorView;
using kiln::client::FromDLTensor;
using kiln::client::GuardC;

Status Invalid(const std::string& what) { return Status(StatusCode::kInvalidArgument, what); }

// The dtypes a decode plan can name: fp16 and bf16; the others get a message naming them.
StatusOr<kiln::DType> PlanDType(DLDataType t, const char* api) {
  if (t.lanes == 1 && t.code == kDLFloat && t.bits == 16) return kiln::DType::kFloat16;
  if (t.lanes == 1 && t.code == kDLBfloat && t.bits == 16) return kiln::DType::kBFloat16;
  std::string found = t.code == kDLFloat && t.bits == 32 ? std::string("fp32")
                                                          : "code " + std::to_string(t.code) + " with " +
                                                                std::to_string(t.bits) + " bits and " +
                                                                std::to_string(t.lanes) + " lanes";
  return Invalid(std::string(api) + ": dtype: " + found +
                 " is not supported; supported: kDLFloat 16 (fp16), kDLBfloat 16 (bf16)");
}

// DLTensors in order, converted (NULL and bad fields refused by name).
template <size_t N>
Status Convert(const char* api, const DLTensor* const (&in)[N], const char* const (&names)[N], TensorView (&out)[N]) {
  for (size_t i = 0; i < N; ++i) {
    auto view = FromDLTensor(in[i], names[i]);
    if (!view.ok()) return view.status().WithContext(api);
    out[i] = *view;
  }
  return kiln::OkStatus();
}

}  // namespace

extern "C" {

kiln_status kiln_append_paged_kv(DLTensor* k_cache, DLTensor* v_cache, const DLTensor* k, const DLTensor* v,
                                 const DLTensor* batch_indices, const DLTensor* positions, const DLTensor* kv_indptr,
                                 const DLTensor* kv_indices, const DLTensor* kv_last_page_len, void* stream) {
  static constexpr const char* kApi = "kiln_append_paged_kv";
  return GuardC(kApi, [&] {
    const DLTensor* const in[] = {k_cache, v_cache, k, v, batch_indices, positions, kv_indptr, kv_indices,
                                  kv_last_page_len};
    const char* const names[] = {"k_cache", "v_cache",   "k",          "v",
                                 "batch_indices", "positions", "kv_indptr", "kv_indices",
                                 "kv_last_page_len"};
    TensorView t[9];
    KILN_RETURN_IF_ERROR(Convert(kApi, in, names, t));
    return kiln::client::AppendPagedKvWithApi(kApi, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], stream);
  });
}

kiln_status kiln_batch_decode_plan_create(const int32_t* kv_indptr_host, const int32_t* kv_last_page_len_host,
                                          int64_t batch_size, int64_t num_qo_heads, int64_t num_kv_heads,
                                          int64_t head_dim, int64_t page_size, DLDataType dtype, double sm_scale,
                                          double logits_soft_cap, int64_t window_left, int device,
                                          kiln_batch_decode_plan** plan) {
  static constexpr const char* kApi = "kiln_batch_decode_plan_create";
  return GuardC(kApi, [&]() -> Status {
    if (plan == nullptr) return Invalid(std::string(kApi) + ": plan (the result pointer) is NULL");
    *plan = nullptr;
    auto kiln_dtype = PlanDType(dtype, kApi);
    if (!kiln_dtype.ok()) return kiln_dtype.status();
    kiln::ops::DecodeOptions options;
    options.sm_scale = sm_scale;
    options.logits_soft_cap = logits_soft_cap;
    options.window_left = window_left;
    auto made = kiln::ops::BatchDecodePlan::Create(kv_indptr_host, kv_last_page_len_host, batch_size, num_qo_heads,
                                                   num_kv_heads, head_dim, page_size, *kiln_dtype, options, device);
    if (!made.ok()) {
      // The C++ API's name in front of the message becomes the C function's.
      const std::string cpp = "kiln::ops::BatchDecodePlan::Create: ";
      const std::string& message = made.status().message();
      return Status(made.status().code(), message.rfind(cpp, 0) == 0
                                              ? std::string(kApi) + ": " + message.substr(cpp.size())
                                              : message);
    }
    *plan = new kiln_batch_decode_plan{std::move(made).value()};
    return kiln::OkStatus();
  });
}

size_t kiln_batch_decode_plan_workspace_bytes(const kiln_batch_decode_plan* plan) {
  return plan != nullptr ? plan->plan.workspace_bytes() : 0;
}

void kiln_batch_decode_plan_destroy(kiln_batch_decode_plan* plan) { delete plan; }

kiln_status kiln_batch_decode(const kiln_batch_decode_plan* plan, DLTensor* out, DLTensor* lse, const DLTensor* q,
                              const DLTensor* k_cache, const DLTensor* v_cache, const DLTensor* kv_indptr,
                              const DLTensor* kv_indices, const DLTensor* kv_last_page_len, void* workspace,
                              size_t workspace_bytes, void* stream) {
  static constexpr const char* kApi = "kiln_batch_decode";
  return GuardC(kApi, [&]() -> Status {
    if (plan == nullptr) return Invalid(std::string(kApi) + ": plan is NULL (make one with kiln_batch_decode_plan_create)");
    const DLTensor* const in[] = {out, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len};
    const char* const names[] = {"out", "q", "k_cache", "v_cache", "kv_indptr", "kv_indices", "kv_last_page_len"};
    TensorView t[7];
    KILN_RETURN_IF_ERROR(Convert(kApi, in, names, t));
    TensorView lse_view;
    if (lse != nullptr) {
      auto view = FromDLTensor(lse, "lse");
      if (!view.ok()) return view.status().WithContext(kApi);
      lse_view = *view;
    }
    return kiln::client::BatchDecodeWithApi(kApi, plan->plan, t[0], lse != nullptr ? &lse_view : nullptr, t[1], t[2],
                                            t[3], t[4], t[5], t[6], workspace, workspace_bytes, stream);
  });
}

}  // extern "C"
