// kiln::ops::BatchPrefillPlan: argument checks, the kernel's scalars and the schedule.
#include "client/ops/prefill/prefill_plan.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <vector>

#include "client/core/api/invalid_argument.h"
#include "client/ops/attention_args.h"
#include "client/ops/plan_device.h"
#include "kiln/prefill/prefill_contract.h"

namespace kiln::client {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string At(const char* name, int64_t i, int64_t value) {
  return std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(value);
}

// indptr [batch + 1]: starts at >= 0 and never decreases. `what` names its unit.
Status CheckIndptr(const int32_t* indptr, int64_t batch, const char* name, const char* what) {
  if (indptr[0] < 0)
    return InvalidArgument(std::string(name) + ": " + At(name, 0, indptr[0]) + " is negative; offsets are >= 0");
  for (int64_t b = 0; b < batch; ++b)
    if (indptr[b + 1] < indptr[b])
      return InvalidArgument(std::string(name) + ": not monotonic: " + At(name, b + 1, indptr[b + 1]) + " < " +
                             At(name, b, indptr[b]) + " (request " + std::to_string(b) + " would have a negative " +
                             what + ")");
  return OkStatus();
}

// Each request's (q_len, kv_len) from the host arrays, or the first inconsistency.
StatusOr<std::vector<PrefillRequest>> Requests(const PrefillPlanRequest& r) {
  KILN_RETURN_IF_ERROR(CheckIndptr(r.qo_indptr_host, r.batch_size, "qo_indptr_host", "query count"));
  KILN_RETURN_IF_ERROR(
      CheckIndptr(r.kv_indptr_host, r.batch_size, "kv_indptr_host", r.paged ? "page count" : "KV length"));
  std::vector<PrefillRequest> out(static_cast<size_t>(r.batch_size));
  for (int64_t b = 0; b < r.batch_size; ++b) {
    PrefillRequest& q = out[static_cast<size_t>(b)];
    q.q_len = static_cast<int64_t>(r.qo_indptr_host[b + 1]) - r.qo_indptr_host[b];
    const int64_t span = static_cast<int64_t>(r.kv_indptr_host[b + 1]) - r.kv_indptr_host[b];
    if (!r.paged) {
      q.kv_len = span;
      continue;
    }
    if (span == 0) continue;  // no page: kv_len 0, kv_last_page_len unread
    const int32_t last = r.kv_last_page_len_host[b];
    if (last < 1 || last > r.page_size)
      return InvalidArgument("kv_last_page_len_host: request " + std::to_string(b) + "'s last page holds " +
                             std::to_string(last) + " tokens; expected 1 to page_size (" + std::to_string(r.page_size) +
                             ")");
    q.kv_len = (span - 1) * r.page_size + last;
    if (q.kv_len > INT32_MAX)
      return InvalidArgument("kv_indptr_host: request " + std::to_string(b) + " has " + std::to_string(q.kv_len) +
                             " positions; at most 2^31-1 are supported");
  }
  return out;
}

}  // namespace

Status CheckPrefillShape(int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim, DType dtype) {
  return CheckAttentionHeads(num_qo_heads, num_kv_heads, head_dim, dtype);
}

ops::BatchPrefillPlan PrefillPlanAccess::Make(ops::BatchPrefillPlan::State state) {
  ops::BatchPrefillPlan plan;
  plan.state_ = std::make_shared<const ops::BatchPrefillPlan::State>(std::move(state));
  return plan;
}

StatusOr<ops::BatchPrefillPlan> PlanBatchPrefill(const PrefillPlanRequest& r, int device, int num_sms,
                                                 const char* api) {
  auto fail = [api](const Status& s) { return s.WithContext(api); };
  if (r.batch_size < 1)
    return InvalidArgument(api, "batch_size: expected at least 1 request, found " + std::to_string(r.batch_size) +
                                    " (an empty batch has nothing to attend; skip the call)");
  if (r.batch_size > INT32_MAX - 1)
    return InvalidArgument(api, "batch_size: at most 2^31-2 requests, found " + std::to_string(r.batch_size));
  if (r.qo_indptr_host == nullptr)
    return InvalidArgument(api, "qo_indptr_host: NULL; expected the host copy of qo_indptr [batch_size + 1]");
  if (r.kv_indptr_host == nullptr)
    return InvalidArgument(api, "kv_indptr_host: NULL; expected the host copy of kv_indptr [batch_size + 1]");
  if (r.paged && r.kv_last_page_len_host == nullptr)
    return InvalidArgument(api, "kv_last_page_len_host: NULL; expected the host copy of kv_last_page_len [batch_size]");
  KILN_RETURN_IF_ERROR(fail(CheckPrefillShape(r.num_qo_heads, r.num_kv_heads, r.head_dim, r.dtype)));
  if (r.paged && (r.page_size < 1 || r.page_size > prefill::kMaxPageSize || (r.page_size & (r.page_size - 1)) != 0))
    return InvalidArgument(api, "page_size: " + std::to_string(r.page_size) +
                                    " is not supported; supported: a power of two, 1 to 256");
  if (r.num_kv_heads > 65535)
    return InvalidArgument(api, "num_kv_heads: at most 65535 (the grid's y dimension), found " +
                                    std::to_string(r.num_kv_heads));
  auto scalars = CheckAttentionScalars(r.options.sm_scale, r.options.logits_soft_cap, r.options.window_left,
                                       r.head_dim);
  if (!scalars.ok()) return fail(scalars.status());
  auto requests = Requests(r);
  if (!requests.ok()) return fail(requests.status());

  ops::BatchPrefillPlan::State state;
  state.paged = r.paged;
  state.batch = r.batch_size;
  state.num_qo_heads = r.num_qo_heads;
  state.num_kv_heads = r.num_kv_heads;
  state.head_dim = r.head_dim;
  state.page_size = r.paged ? r.page_size : 0;
  state.group = r.num_qo_heads / r.num_kv_heads;
  state.dtype = r.dtype;
  state.device = device;
  state.options = r.options;
  state.logit_scale = scalars->logit_scale;
  state.cap_scale = scalars->cap_scale;
  state.window_left = scalars->window_left;
  state.total_q = r.qo_indptr_host[r.batch_size];
  state.kv_end = r.kv_indptr_host[r.batch_size];
  for (const PrefillRequest& q : *requests) {
    state.total_kv += q.kv_len;
    state.max_q_len = std::max(state.max_q_len, q.q_len);
    state.max_kv_len = std::max(state.max_kv_len, q.kv_len);
  }
  // The window as the kernel takes it (clamped to 2^31-1), so that the chunks' base (KvBase)
  // is the one the kernel computes.
  state.schedule = SchedulePrefill(*requests, state.group, r.num_kv_heads, r.head_dim, r.options.causal,
                                   state.window_left, num_sms);
  if (state.schedule.num_items > INT32_MAX)
    return InvalidArgument(api, "qo_indptr_host: the batch needs " + std::to_string(state.schedule.num_items) +
                                    " blocks per kv head, above 2^31-1 (" +
                                    DescribePrefillSchedule(state.schedule, r.batch_size) + "); split the batch");
  if (state.schedule.split) {
    if (state.schedule.num_items * r.num_kv_heads * state.schedule.tile_rows > INT32_MAX)
      return InvalidArgument(api, "qo_indptr_host: the split batch needs more than 2^31-1 workspace rows (" +
                                      DescribePrefillSchedule(state.schedule, r.batch_size) + "); split the batch");
    state.partial_rows = state.schedule.num_items * r.num_kv_heads * state.schedule.tile_rows;
    const size_t rows = static_cast<size_t>(state.partial_rows);
    state.partial_lse_offset = RoundUp(rows * static_cast<size_t>(r.head_dim) * sizeof(float), 256);
    state.workspace_bytes = RoundUp(state.partial_lse_offset + rows * sizeof(float), 256);
  }
  return PrefillPlanAccess::Make(std::move(state));
}

}  // namespace kiln::client

namespace kiln::ops {
namespace {

StatusOr<BatchPrefillPlan> CreatePlan(const client::PrefillPlanRequest& request, int device, const char* api) {
  // Every argument is checked before the driver is touched (the SM count does not change them).
  KILN_RETURN_IF_ERROR(client::PlanBatchPrefill(request, 0, 1, api).status());
  KILN_ASSIGN_OR_RETURN(const client::PlanDevice found, client::ResolvePlanDevice(device, api));
  return client::PlanBatchPrefill(request, found.ordinal, found.sms, api);
}

}  // namespace

StatusOr<BatchPrefillPlan> BatchPrefillPlan::CreateRagged(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                                          int64_t batch_size, int64_t num_qo_heads,
                                                          int64_t num_kv_heads, int64_t head_dim, DType dtype,
                                                          const PrefillOptions& options, int device) {
  client::PrefillPlanRequest r;
  r.qo_indptr_host = qo_indptr_host;
  r.kv_indptr_host = kv_indptr_host;
  r.batch_size = batch_size;
  r.num_qo_heads = num_qo_heads;
  r.num_kv_heads = num_kv_heads;
  r.head_dim = head_dim;
  r.dtype = dtype;
  r.options = options;
  return CreatePlan(r, device, "kiln::ops::BatchPrefillPlan::CreateRagged");
}

StatusOr<BatchPrefillPlan> BatchPrefillPlan::CreatePaged(const int32_t* qo_indptr_host, const int32_t* kv_indptr_host,
                                                         const int32_t* kv_last_page_len_host, int64_t batch_size,
                                                         int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim,
                                                         int64_t page_size, DType dtype, const PrefillOptions& options,
                                                         int device) {
  client::PrefillPlanRequest r;
  r.qo_indptr_host = qo_indptr_host;
  r.kv_indptr_host = kv_indptr_host;
  r.kv_last_page_len_host = kv_last_page_len_host;
  r.paged = true;
  r.batch_size = batch_size;
  r.num_qo_heads = num_qo_heads;
  r.num_kv_heads = num_kv_heads;
  r.head_dim = head_dim;
  r.page_size = page_size;
  r.dtype = dtype;
  r.options = options;
  return CreatePlan(r, device, "kiln::ops::BatchPrefillPlan::CreatePaged");
}

size_t BatchPrefillPlan::workspace_bytes() const { return state_ ? state_->workspace_bytes : 0; }
bool BatchPrefillPlan::paged() const { return state_ && state_->paged; }
bool BatchPrefillPlan::split() const { return state_ && state_->schedule.split; }
int64_t BatchPrefillPlan::num_items() const { return state_ ? state_->schedule.num_items : 0; }
int64_t BatchPrefillPlan::chunk_tokens() const { return state_ ? state_->schedule.chunk_tokens : 0; }
int64_t BatchPrefillPlan::batch_size() const { return state_ ? state_->batch : 0; }
int64_t BatchPrefillPlan::total_q() const { return state_ ? state_->total_q : 0; }
int64_t BatchPrefillPlan::num_qo_heads() const { return state_ ? state_->num_qo_heads : 0; }
int64_t BatchPrefillPlan::num_kv_heads() const { return state_ ? state_->num_kv_heads : 0; }
int64_t BatchPrefillPlan::head_dim() const { return state_ ? state_->head_dim : 0; }
int64_t BatchPrefillPlan::page_size() const { return state_ ? state_->page_size : 0; }
DType BatchPrefillPlan::dtype() const { return state_ ? state_->dtype : DType::kBFloat16; }
int BatchPrefillPlan::device() const { return state_ ? state_->device : -1; }
const PrefillOptions& BatchPrefillPlan::options() const {
  static const PrefillOptions kNone;
  return state_ ? state_->options : kNone;
}

std::string BatchPrefillPlan::Describe() const {
  if (!state_) return "an empty BatchPrefillPlan (moved from)";
  const State& s = *state_;
  char scalars[200];
  std::snprintf(scalars, sizeof(scalars), "%s, sm_scale %g, soft cap %s, window %s",
                s.options.causal ? "causal" : "not causal",
                s.options.sm_scale == 0 ? 1.0 / std::sqrt(static_cast<double>(s.head_dim)) : s.options.sm_scale,
                s.options.logits_soft_cap > 0 ? std::to_string(s.options.logits_soft_cap).c_str() : "off",
                s.options.window_left >= 0 ? std::to_string(s.options.window_left).c_str() : "off");
  return std::string(s.paged ? "paged (page_size " + std::to_string(s.page_size) + ")" : "ragged") + ", " +
         DTypeName(s.dtype) + ", " + std::to_string(s.num_qo_heads) + " query / " + std::to_string(s.num_kv_heads) +
         " kv heads (group " + std::to_string(s.group) + "), head_dim " + std::to_string(s.head_dim) + ", " + scalars +
         "; " + std::to_string(s.total_q) + " queries (longest " + std::to_string(s.max_q_len) + "), " +
         std::to_string(s.total_kv) + " KV positions (longest " + std::to_string(s.max_kv_len) + "); " +
         client::DescribePrefillSchedule(s.schedule, s.batch) + "; workspace " + std::to_string(s.workspace_bytes) +
         " bytes; cuda:" + std::to_string(s.device);
}

}  // namespace kiln::ops
