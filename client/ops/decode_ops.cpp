// kiln::ops::append_paged_kv and kiln::ops::batch_decode (kiln/ops/decode.h).
#include <cmath>
#include <cstdio>
#include <string>

#include "client/ops/api_log.h"
#include "client/ops/decode_call.h"
#include "client/ops/decode_launcher.h"
#include "kiln/ops/decode.h"

namespace kiln::ops {

Status append_paged_kv(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k,
                       const TensorView& v, const TensorView& batch_indices, const TensorView& positions,
                       const TensorView& kv_indptr, const TensorView& kv_indices, const TensorView& kv_last_page_len,
                       void* stream) {
  static constexpr const char* kApi = "kiln::ops::append_paged_kv";
  if (client::ApiLogLevel() > 0)
    client::LogOpCall(kApi,
                      {{"k_cache", &k_cache}, {"v_cache", &v_cache}, {"k", &k}, {"v", &v},
                       {"batch_indices", &batch_indices}, {"positions", &positions}, {"kv_indptr", &kv_indptr},
                       {"kv_indices", &kv_indices}, {"kv_last_page_len", &kv_last_page_len}},
                      NAN, stream);
  auto call = client::CheckAppendPagedKv(k_cache, v_cache, k, v, batch_indices, positions, kv_indptr, kv_indices,
                                         kv_last_page_len, kApi);
  if (!call.ok()) return call.status();
  return client::RunAppendPagedKv(*call, stream);
}

Status batch_decode(const BatchDecodePlan& plan, const TensorView& out, const TensorView* lse, const TensorView& q,
                    const TensorView& k_cache, const TensorView& v_cache, const TensorView& kv_indptr,
                    const TensorView& kv_indices, const TensorView& kv_last_page_len, void* workspace,
                    size_t workspace_bytes, void* stream) {
  static constexpr const char* kApi = "kiln::ops::batch_decode";
  if (client::ApiLogLevel() > 0) {
    const TensorView none;
    client::LogOpCall(kApi,
                      {{"out", &out}, {"lse", lse != nullptr ? lse : &none}, {"q", &q}, {"k_cache", &k_cache},
                       {"v_cache", &v_cache}, {"kv_indptr", &kv_indptr}, {"kv_indices", &kv_indices},
                       {"kv_last_page_len", &kv_last_page_len}},
                      NAN, stream);
    // The plan's scalars and schedule are inputs too (level 3: every argument).
    if (client::ApiLogLevel() >= 3) {
      char buffer[96];
      std::snprintf(buffer, sizeof(buffer), "; workspace %p (%zu bytes)\n", workspace, workspace_bytes);
      const std::string line = std::string("[kiln api]   plan: ") + plan.Describe() + buffer;
      std::fwrite(line.data(), 1, line.size(), stderr);
    }
  }
  auto call = client::CheckBatchDecode(plan, out, lse, q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len,
                                       workspace, workspace_bytes, kApi);
  if (!call.ok()) return call.status();
  return client::RunBatchDecode(*call, stream);
}

}  // namespace kiln::ops
