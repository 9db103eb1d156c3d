// kiln::ops::append_paged_kv and kiln::ops::batch_decode (kiln/ops/decode.h), and the path
// they share with the C ABI (decode_ops.h).
#include "client/ops/decode_ops.h"

#include "client/diag/call_trace.h"
#include "client/ops/decode_call.h"
#include "client/ops/decode_launcher.h"

namespace kiln::client {

Status AppendPagedKvWithApi(const char* api, const TensorView& k_cache, const TensorView& v_cache,
                            const TensorView& k, const TensorView& v, const TensorView& batch_indices,
                            const TensorView& positions, const TensorView& kv_indptr, const TensorView& kv_indices,
                            const TensorView& kv_last_page_len, void* stream) {
  auto body = [&]() -> Status {
    auto call = CheckAppendPagedKv(k_cache, v_cache, k, v, batch_indices, positions, kv_indptr, kv_indices,
                                   kv_last_page_len, api);
    if (!call.ok()) return call.status();
    return RunAppendPagedKv(*call, stream);
  };
  if (KILN_UNLIKELY(diag::Level() != 0))
    return diag::Traced("append_paged_kv", api, stream,
                        [&](diag::OpCall& c) {
                          c.InOut("k_cache", k_cache)
                              .InOut("v_cache", v_cache)
                              .In("k", k)
                              .In("v", v)
                              .In("batch_indices", batch_indices)
                              .In("positions", positions)
                              .In("kv_indptr", kv_indptr)
                              .In("kv_indices", kv_indices)
                              .In("kv_last_page_len", kv_last_page_len);
                        },
                        body);
  return body();
}

Status BatchDecodeWithApi(const char* api, const ops::BatchDecodePlan& plan, const TensorView& out,
                          const TensorView* lse, const TensorView& q, const TensorView& k_cache,
                          const TensorView& v_cache, const TensorView& kv_indptr, const TensorView& kv_indices,
                          const TensorView& kv_last_page_len, void* workspace, size_t workspace_bytes, void* stream) {
  auto body = [&]() -> Status {
    auto call = CheckBatchDecode(plan, out, lse, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len,
                                 workspace, workspace_bytes, api);
    if (!call.ok()) return call.status();
    return RunBatchDecode(*call, stream);
  };
  if (KILN_UNLIKELY(diag::Level() != 0))
    return diag::Traced("batch_decode", api, stream,
                        [&](diag::OpCall& c) {
                          c.Out("out", out);
                          if (lse != nullptr) c.Out("lse", *lse);
                          c.In("q", q)
                              .In("k_cache", k_cache)
                              .In("v_cache", v_cache)
                              .In("kv_indptr", kv_indptr)
                              .In("kv_indices", kv_indices)
                              .In("kv_last_page_len", kv_last_page_len);
                          const ops::DecodeOptions& o = plan.options();
                          c.Param("batch_size", plan.batch_size())
                              .Param("num_qo_heads", plan.num_qo_heads())
                              .Param("num_kv_heads", plan.num_kv_heads())
                              .Param("head_dim", plan.head_dim())
                              .Param("page_size", plan.page_size())
                              .Param("dtype", std::string(DTypeName(plan.dtype())))
                              .Param("sm_scale", o.sm_scale)
                              .Param("logits_soft_cap", o.logits_soft_cap)
                              .Param("window_left", o.window_left)
                              .Param("plan_device", plan.device())
                              .Param("workspace", diag::PointerText(workspace))
                              .Param("workspace_bytes", static_cast<uint64_t>(workspace_bytes))
                              .Param("plan", plan.Describe());
                        },
                        body);
  return body();
}

}  // namespace kiln::client

namespace kiln::ops {

Status append_paged_kv(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k,
                       const TensorView& v, const TensorView& batch_indices, const TensorView& positions,
                       const TensorView& kv_indptr, const TensorView& kv_indices, const TensorView& kv_last_page_len,
                       void* stream) {
  return client::AppendPagedKvWithApi("kiln::ops::append_paged_kv", k_cache, v_cache, k, v, batch_indices, positions,
                                      kv_indptr, kv_indices, kv_last_page_len, stream);
}

Status batch_decode(const BatchDecodePlan& plan, const TensorView& out, const TensorView* lse, const TensorView& q,
                    const TensorView& k_cache, const TensorView& v_cache, const TensorView& kv_indptr,
                    const TensorView& kv_indices, const TensorView& kv_last_page_len, void* workspace,
                    size_t workspace_bytes, void* stream) {
  return client::BatchDecodeWithApi("kiln::ops::batch_decode", plan, out, lse, q, k_cache, v_cache, kv_indptr,
                                    kv_indices, kv_last_page_len, workspace, workspace_bytes, stream);
}

}  // namespace kiln::ops
