#include "client/ops/prefill/prefill_call.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/attention_tensors.h"
#include "client/ops/row_view.h"

namespace kiln::client {
namespace {

// q, out and ragged k, v move in 16-byte chunks (cp.async, vector stores): token and head
// strides multiples of 8 elements, data 16-byte aligned.
Status CheckChunks(const HeadsView& v) {
  if (v.rows * v.heads * v.head_dim == 0) return OkStatus();
  if ((v.rows > 1 && v.row_stride % 8 != 0) || (v.heads > 1 && v.head_stride % 8 != 0))
    return InvalidArgument(std::string(v.name) +
                           ": the token and head strides must be multiples of 8 elements (it moves in 16-byte "
                           "chunks), found strides [" +
                           std::to_string(v.row_stride) + ", " + std::to_string(v.head_stride) + ", 1]");
  if (reinterpret_cast<uintptr_t>(v.data) % 16 != 0)
    return InvalidArgument(std::string(v.name) + ": data pointer " + PointerText(v.data) +
                           " is not 16-byte aligned (it moves in 16-byte chunks)");
  return OkStatus();
}

// An index vector of the plan: int32 [batch + 1].
StatusOr<Int32Vector> ViewIndptr(const TensorView& t, const char* name, int64_t batch) {
  KILN_ASSIGN_OR_RETURN(const Int32Vector v, ViewInt32Vector(t, name));
  if (v.size != batch + 1)
    return InvalidArgument(std::string(name) + ": expected shape [" + std::to_string(batch + 1) +
                           "] (the plan's batch_size + 1), found " + ShapeText(t));
  return v;
}

}  // namespace

StatusOr<BatchPrefillCall> CheckBatchPrefill(const ops::BatchPrefillPlan& plan, bool paged, const TensorView& out_t,
                                             const TensorView* lse, const TensorView& q_t,
                                             const TensorView& qo_indptr_t, const PrefillKv& kv, void* workspace,
                                             size_t workspace_bytes, const char* api) {
  auto fail = [api](const Status& s) { return s.WithContext(api); };
  const ops::BatchPrefillPlan::State* s = PrefillPlanAccess::Get(plan);
  if (s == nullptr)
    return fail(InvalidArgument("plan: empty (moved from); make one with BatchPrefillPlan::Create" +
                                std::string(paged ? "Paged" : "Ragged")));
  if (s->paged != paged)
    return fail(InvalidArgument(std::string("plan: made by BatchPrefillPlan::") +
                                (s->paged ? "CreatePaged" : "CreateRagged") + ", but this is batch_prefill_" +
                                (paged ? "paged" : "ragged") + "; make the plan with CreatePaged" +
                                (paged ? "" : " (ragged: CreateRagged)")));

  auto q = ViewHeads(q_t, "q");
  if (!q.ok()) return fail(q.status());
  auto out = ViewHeads(out_t, "out");
  if (!out.ok()) return fail(out.status());
  if (q->heads != s->num_qo_heads || q->head_dim != s->head_dim || q->rows < s->total_q)
    return fail(InvalidArgument("q: expected shape [total_q >= " + std::to_string(s->total_q) + ", " +
                                std::to_string(s->num_qo_heads) + ", " + std::to_string(s->head_dim) +
                                "] (the plan's qo_indptr[batch_size], num_qo_heads, head_dim), found " +
                                ShapeText(q_t)));
  KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(q_t, "q", s->dtype, "the plan's")));
  KILN_RETURN_IF_ERROR(fail(CheckHeadsShape(*out, q->rows, s->num_qo_heads, s->head_dim, "q's")));
  KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(out_t, "out", s->dtype, "the plan's")));
  KILN_RETURN_IF_ERROR(fail(CheckChunks(*q)));
  KILN_RETURN_IF_ERROR(fail(CheckChunks(*out)));

  int64_t kv_rows = 0;  // ragged: rows of k and v; paged: pages of the cache
  int64_t k_token_stride = 0, k_head_stride = 0, v_token_stride = 0, v_head_stride = 0;
  const void* k_data = nullptr;
  const void* v_data = nullptr;
  PageTable table;
  Int32Vector kv_indptr;
  if (paged) {
    auto k = ViewPagedCache(*kv.k, "k_cache");
    if (!k.ok()) return fail(k.status());
    auto v = ViewPagedCache(*kv.v, "v_cache");
    if (!v.ok()) return fail(v.status());
    KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(*kv.k, "k_cache", s->dtype, "the plan's")));
    if (k->page_size != s->page_size || k->num_kv_heads != s->num_kv_heads || k->head_dim != s->head_dim)
      return fail(InvalidArgument("k_cache: expected shape [num_pages, " + std::to_string(s->page_size) + ", " +
                                  std::to_string(s->num_kv_heads) + ", " + std::to_string(s->head_dim) +
                                  "] (the plan's page_size, num_kv_heads, head_dim), found " + ShapeText(*kv.k)));
    KILN_RETURN_IF_ERROR(fail(CheckCachePair(*k, *v)));
    auto t = ViewPageTable(*kv.kv_indptr, *kv.kv_indices, *kv.kv_last_page_len, s->batch, s->kv_end);
    if (!t.ok()) return fail(t.status());
    table = *t;
    kv_indptr = table.indptr;
    kv_rows = k->num_pages;
    k_data = k->data;
    v_data = v->data;
    k_token_stride = k->page_stride;
    v_token_stride = v->page_stride;
  } else {
    auto k = ViewHeads(*kv.k, "k");
    if (!k.ok()) return fail(k.status());
    auto v = ViewHeads(*kv.v, "v");
    if (!v.ok()) return fail(v.status());
    if (k->heads != s->num_kv_heads || k->head_dim != s->head_dim || k->rows < s->kv_end)
      return fail(InvalidArgument("k: expected shape [total_kv >= " + std::to_string(s->kv_end) + ", " +
                                  std::to_string(s->num_kv_heads) + ", " + std::to_string(s->head_dim) +
                                  "] (the plan's kv_indptr[batch_size], num_kv_heads, head_dim), found " +
                                  ShapeText(*kv.k)));
    KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(*kv.k, "k", s->dtype, "the plan's")));
    KILN_RETURN_IF_ERROR(fail(CheckHeadsShape(*v, k->rows, s->num_kv_heads, s->head_dim, "k's")));
    KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(*kv.v, "v", s->dtype, "the plan's")));
    KILN_RETURN_IF_ERROR(fail(CheckChunks(*k)));
    KILN_RETURN_IF_ERROR(fail(CheckChunks(*v)));
    auto indptr = ViewIndptr(*kv.kv_indptr, "kv_indptr", s->batch);
    if (!indptr.ok()) return fail(indptr.status());
    kv_indptr = *indptr;
    kv_rows = k->rows;
    k_data = k->data;
    v_data = v->data;
    k_token_stride = k->row_stride;
    k_head_stride = k->head_stride;
    v_token_stride = v->row_stride;
    v_head_stride = v->head_stride;
  }
  auto qo_indptr = ViewIndptr(qo_indptr_t, "qo_indptr", s->batch);
  if (!qo_indptr.ok()) return fail(qo_indptr.status());

  if (lse != nullptr) {
    auto rows = ViewAsRows(*lse, "lse");
    if (!rows.ok()) return fail(rows.status());
    if (lse->ndim != 2 || lse->shape[0] != q->rows || lse->shape[1] != s->num_qo_heads)
      return fail(InvalidArgument("lse: expected shape " + ListText({q->rows, s->num_qo_heads}) +
                                  " (q's total_q, num_qo_heads), found " + ShapeText(*lse)));
    KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(*lse, "lse", DType::kFloat32, "log-sum-exp is fp32")));
  }

  // One device: the plan's.
  if (q_t.device.index != s->device)
    return fail(InvalidArgument("q: on " + DeviceName(q_t.device) + ", but the plan was made for cuda:" +
                                std::to_string(s->device) + " (its SM count sized the split)"));
  const char* k_name = paged ? "k_cache" : "k";
  const char* v_name = paged ? "v_cache" : "v";
  NamedTensors read = {
      {&q_t, "q"}, {kv.k, k_name}, {kv.v, v_name}, {&qo_indptr_t, "qo_indptr"}, {kv.kv_indptr, "kv_indptr"}};
  if (paged) {
    read.Add(kv.kv_indices, "kv_indices");
    read.Add(kv.kv_last_page_len, "kv_last_page_len");
  }
  for (const auto& [t, name] : read) KILN_RETURN_IF_ERROR(fail(CheckSameDevice(*t, name, q_t.device, "q")));
  KILN_RETURN_IF_ERROR(fail(CheckSameDevice(out_t, "out", q_t.device, "q")));
  if (lse != nullptr) KILN_RETURN_IF_ERROR(fail(CheckSameDevice(*lse, "lse", q_t.device, "q")));

  // What is written shares no byte with anything else.
  for (const auto& [t, name] : read) {
    KILN_RETURN_IF_ERROR(fail(CheckDisjoint(out_t, "out", *t, name)));
    if (lse != nullptr) KILN_RETURN_IF_ERROR(fail(CheckDisjoint(*lse, "lse", *t, name)));
  }
  if (lse != nullptr) KILN_RETURN_IF_ERROR(fail(CheckDisjoint(out_t, "out", *lse, "lse")));
  NamedTensors all = read;
  all.Add(&out_t, "out");
  if (lse != nullptr) all.Add(lse, "lse");
  KILN_RETURN_IF_ERROR(fail(CheckWorkspace(workspace, workspace_bytes, s->workspace_bytes, all.items())));

  BatchPrefillCall call;
  call.api = api;
  call.plan = s;
  prefill::KilnBatchPrefillParams& p = call.params;
  p.out = out->data;
  p.lse = lse != nullptr ? static_cast<float*>(lse->data) : nullptr;
  p.q = q->data;
  p.k = k_data;
  p.v = v_data;
  p.qo_indptr = qo_indptr->data;
  p.kv_indptr = kv_indptr.data;
  p.kv_indices = paged ? table.indices.data : nullptr;
  p.kv_last_page_len = paged ? table.last_page_len.data : nullptr;
  char* ws = static_cast<char*>(workspace);
  p.partial_out = s->workspace_bytes > 0 ? reinterpret_cast<float*>(ws) : nullptr;
  p.partial_lse = s->workspace_bytes > 0 ? reinterpret_cast<float*>(ws + s->partial_lse_offset) : nullptr;
  p.q_stride_token = q->row_stride;
  p.q_stride_head = q->head_stride;
  p.out_stride_token = out->row_stride;
  p.out_stride_head = out->head_stride;
  p.lse_stride_token = lse != nullptr ? lse->strides[0] : 0;
  p.k_stride_token = k_token_stride;
  p.k_stride_head = k_head_stride;
  p.v_stride_token = v_token_stride;
  p.v_stride_head = v_head_stride;
  p.total_q = q->rows;
  p.total_kv = kv_rows;
  p.num_indices = paged ? table.indices.size : 0;
  p.num_qo_heads = static_cast<int32_t>(s->num_qo_heads);
  p.num_kv_heads = static_cast<int32_t>(s->num_kv_heads);
  p.logit_scale = s->logit_scale;
  p.cap_scale = s->cap_scale;
  p.window_left = s->window_left;
  const PrefillSchedule& sched = s->schedule;
  p.schedule.num_items = static_cast<int32_t>(sched.num_items);
  p.schedule.listed = sched.listed ? 1 : 0;
  p.schedule.split = sched.split ? 1 : 0;
  p.schedule.chunk_tokens = static_cast<int32_t>(sched.chunk_tokens);
  p.schedule.batch = static_cast<int32_t>(s->batch);
  p.schedule.tiles_per_request = static_cast<int32_t>(sched.tiles_per_request);
  p.schedule.merge_max_q_len = static_cast<int32_t>(sched.merge_max_q_len);
  p.schedule.partial_rows = static_cast<int32_t>(s->partial_rows);
  p.schedule.heads_fastest = sched.heads_fastest ? 1 : 0;
  if (sched.listed) {
    std::memcpy(p.schedule.item_begin, sched.item_begin.data(), sched.item_begin.size() * sizeof(int32_t));
    std::memcpy(p.schedule.kv_chunks, sched.kv_chunks.data(), sched.kv_chunks.size() * sizeof(uint16_t));
  }
  return call;
}

}  // namespace kiln::client
