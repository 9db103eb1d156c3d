// The one path of both decode APIs (kiln::ops::append_paged_kv / batch_decode and the C ABI's
// kiln_append_paged_kv / kiln_batch_decode): trace the call when KILN_LOGLEVEL asks for it
// (client/diag/call_trace.h), check, launch. `api` names the caller in messages and log
// lines, and must be a string literal.
#pragma once

#include <cstddef>

#include "kiln/ops/decode.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

Status AppendPagedKvWithApi(const char* api, const TensorView& k_cache, const TensorView& v_cache,
                            const TensorView& k, const TensorView& v, const TensorView& batch_indices,
                            const TensorView& positions, const TensorView& kv_indptr, const TensorView& kv_indices,
                            const TensorView& kv_last_page_len, void* stream);

// A traced batch_decode records what `plan` was made from (sizes, dtype, options, device) as
// params, so `kiln replay` can make the plan again from the dumped page table.
Status BatchDecodeWithApi(const char* api, const ops::BatchDecodePlan& plan, const TensorView& out,
                          const TensorView* lse, const TensorView& q, const TensorView& k_cache,
                          const TensorView& v_cache, const TensorView& kv_indptr, const TensorView& kv_indices,
                          const TensorView& kv_last_page_len, void* workspace, size_t workspace_bytes, void* stream);

}  // namespace kiln::client
