// kiln::ops::BatchDecodePlan: argument checks, the kernel's scalars and the split schedule.
#include "client/ops/decode/decode_plan.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <vector>

#include "client/ops/attention_args.h"
#include "client/ops/plan_device.h"
#include "kiln/decode/decode_contract.h"

namespace kiln::client {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Each request's KV length from the host page table, or the first inconsistency.
StatusOr<std::vector<int64_t>> KvLengths(const int32_t* indptr, const int32_t* last, int64_t batch, int64_t page_size) {
  std::vector<int64_t> kv_len(static_cast<size_t>(batch));
  if (indptr[0] < 0)
    return InvalidArgument("kv_indptr_host: kv_indptr[0] = " + std::to_string(indptr[0]) +
                           " is negative; offsets into kv_indices are >= 0");
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pages = static_cast<int64_t>(indptr[b + 1]) - indptr[b];
    if (pages < 1)
      return InvalidArgument("kv_indptr_host: request " + std::to_string(b) + " has " + std::to_string(pages) +
                             " pages (kv_indptr[" + std::to_string(b) + "] = " + std::to_string(indptr[b]) +
                             ", kv_indptr[" + std::to_string(b + 1) + "] = " + std::to_string(indptr[b + 1]) +
                             "); every request needs at least one page (the query's own token)");
    if (last[b] < 1 || last[b] > page_size)
      return InvalidArgument("kv_last_page_len_host: request " + std::to_string(b) + "'s last page holds " +
                             std::to_string(last[b]) + " tokens; expected 1 to page_size (" +
                             std::to_string(page_size) + ")");
    kv_len[static_cast<size_t>(b)] = (pages - 1) * page_size + last[b];
    if (kv_len[static_cast<size_t>(b)] > INT32_MAX)
      return InvalidArgument("kv_indptr_host: request " + std::to_string(b) + " has " +
                             std::to_string(kv_len[static_cast<size_t>(b)]) +
                             " positions; at most 2^31-1 are supported");
  }
  return kv_len;
}

}  // namespace

Status CheckDecodeShape(int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim, int64_t page_size, DType dtype) {
  KILN_RETURN_IF_ERROR(CheckAttentionHeads(num_qo_heads, num_kv_heads, head_dim, dtype));
  if (page_size < 1 || page_size > 256 || (page_size & (page_size - 1)) != 0)
    return InvalidArgument("page_size: " + std::to_string(page_size) +
                           " is not supported; supported: a power of two, 1 to 256");
  return OkStatus();
}

ops::BatchDecodePlan DecodePlanAccess::Make(ops::BatchDecodePlan::State state) {
  ops::BatchDecodePlan plan;
  plan.state_ = std::make_shared<const ops::BatchDecodePlan::State>(std::move(state));
  return plan;
}

StatusOr<ops::BatchDecodePlan> PlanBatchDecode(const int32_t* kv_indptr_host, const int32_t* kv_last_page_len_host,
                                               int64_t batch_size, int64_t num_qo_heads, int64_t num_kv_heads,
                                               int64_t head_dim, int64_t page_size, DType dtype,
                                               const ops::DecodeOptions& options, int device, int num_sms,
                                               const char* api) {
  if (batch_size < 1)
    return InvalidArgument(api, "batch_size: expected at least 1 request, found " + std::to_string(batch_size) +
                                    " (an empty batch has nothing to decode; skip the call)");
  if (batch_size > INT32_MAX - 1)
    return InvalidArgument(api, "batch_size: at most 2^31-2 requests, found " + std::to_string(batch_size));
  if (kv_indptr_host == nullptr)
    return InvalidArgument(api, "kv_indptr_host: NULL; expected the host copy of kv_indptr [batch_size + 1]");
  if (kv_last_page_len_host == nullptr)
    return InvalidArgument(api, "kv_last_page_len_host: NULL; expected the host copy of kv_last_page_len [batch_size]");
  Status shape = CheckDecodeShape(num_qo_heads, num_kv_heads, head_dim, page_size, dtype);
  if (!shape.ok()) return shape.WithContext(api);

  auto scalars = CheckAttentionScalars(options.sm_scale, options.logits_soft_cap, options.window_left, head_dim);
  if (!scalars.ok()) return scalars.status().WithContext(api);

  if (batch_size * num_kv_heads > INT32_MAX)
    return InvalidArgument(api, "batch_size: " + std::to_string(batch_size) + " requests x " +
                                    std::to_string(num_kv_heads) + " kv heads exceed 2^31-1 blocks; split the batch");
  auto kv_len = KvLengths(kv_indptr_host, kv_last_page_len_host, batch_size, page_size);
  if (!kv_len.ok()) return kv_len.status().WithContext(api);

  ops::BatchDecodePlan::State state;
  state.batch = batch_size;
  state.num_qo_heads = num_qo_heads;
  state.num_kv_heads = num_kv_heads;
  state.head_dim = head_dim;
  state.page_size = page_size;
  state.group = num_qo_heads / num_kv_heads;
  state.dtype = dtype;
  state.device = device;
  state.options = options;
  state.logit_scale = scalars->logit_scale;
  state.cap_scale = scalars->cap_scale;
  state.window_left = scalars->window_left;
  state.indptr_end = kv_indptr_host[batch_size];
  state.schedule = ScheduleBatchDecode(*kv_len, options.window_left, num_kv_heads, page_size, num_sms,
                                       DecodeChunkFromEnvironment());
  if (state.schedule.split) {
    const size_t slots = static_cast<size_t>(state.schedule.num_items) * static_cast<size_t>(num_qo_heads);
    state.partial_lse_offset = RoundUp(slots * static_cast<size_t>(head_dim) * sizeof(float), 256);
    state.workspace_bytes = RoundUp(state.partial_lse_offset + slots * sizeof(float), 256);
  }
  return DecodePlanAccess::Make(std::move(state));
}

}  // namespace kiln::client

namespace kiln::ops {

StatusOr<BatchDecodePlan> BatchDecodePlan::Create(const int32_t* kv_indptr_host, const int32_t* kv_last_page_len_host,
                                                  int64_t batch_size, int64_t num_qo_heads, int64_t num_kv_heads,
                                                  int64_t head_dim, int64_t page_size, DType dtype,
                                                  const DecodeOptions& options, int device) {
  static constexpr const char* kApi = "kiln::ops::BatchDecodePlan::Create";
  // Every argument is checked before the driver is touched (the SM count does not change them).
  KILN_RETURN_IF_ERROR(client::PlanBatchDecode(kv_indptr_host, kv_last_page_len_host, batch_size, num_qo_heads,
                                               num_kv_heads, head_dim, page_size, dtype, options, 0, 1, kApi)
                           .status());
  KILN_ASSIGN_OR_RETURN(const client::PlanDevice found, client::ResolvePlanDevice(device, kApi));
  return client::PlanBatchDecode(kv_indptr_host, kv_last_page_len_host, batch_size, num_qo_heads, num_kv_heads,
                                 head_dim, page_size, dtype, options, found.ordinal, found.sms, kApi);
}

size_t BatchDecodePlan::workspace_bytes() const { return state_ ? state_->workspace_bytes : 0; }
bool BatchDecodePlan::split() const { return state_ && state_->schedule.split; }
int64_t BatchDecodePlan::num_items() const { return state_ ? state_->schedule.num_items : 0; }
int64_t BatchDecodePlan::chunk_pages() const {
  return state_ && state_->schedule.split ? state_->schedule.chunk_tokens / state_->page_size : 0;
}
int64_t BatchDecodePlan::batch_size() const { return state_ ? state_->batch : 0; }
int64_t BatchDecodePlan::num_qo_heads() const { return state_ ? state_->num_qo_heads : 0; }
int64_t BatchDecodePlan::num_kv_heads() const { return state_ ? state_->num_kv_heads : 0; }
int64_t BatchDecodePlan::head_dim() const { return state_ ? state_->head_dim : 0; }
int64_t BatchDecodePlan::page_size() const { return state_ ? state_->page_size : 0; }
DType BatchDecodePlan::dtype() const { return state_ ? state_->dtype : DType::kBFloat16; }
int BatchDecodePlan::device() const { return state_ ? state_->device : -1; }
const DecodeOptions& BatchDecodePlan::options() const {
  static const DecodeOptions kNone;
  return state_ ? state_->options : kNone;
}

std::string BatchDecodePlan::Describe() const {
  if (!state_) return "an empty BatchDecodePlan (moved from)";
  const State& s = *state_;
  char scalars[160];
  std::snprintf(scalars, sizeof(scalars), "sm_scale %g, soft cap %s, window %s",
                s.options.sm_scale == 0 ? 1.0 / std::sqrt(static_cast<double>(s.head_dim)) : s.options.sm_scale,
                s.options.logits_soft_cap > 0 ? std::to_string(s.options.logits_soft_cap).c_str() : "off",
                s.options.window_left >= 0 ? std::to_string(s.options.window_left).c_str() : "off");
  return std::string(DTypeName(s.dtype)) + ", " + std::to_string(s.num_qo_heads) + " query / " +
         std::to_string(s.num_kv_heads) + " kv heads (group " + std::to_string(s.group) + "), head_dim " +
         std::to_string(s.head_dim) + ", page_size " + std::to_string(s.page_size) + ", " + scalars + "; " +
         client::DescribeSchedule(s.schedule, s.batch, s.page_size) + "; workspace " +
         std::to_string(s.workspace_bytes) + " bytes; cuda:" + std::to_string(s.device);
}

}  // namespace kiln::ops
