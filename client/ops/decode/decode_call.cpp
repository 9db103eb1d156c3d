#include "client/ops/decode/decode_call.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/attention_tensors.h"
#include "client/ops/row_view.h"
#include "client/ops/vec_width.h"

namespace kiln::client {
namespace {

// q and out are read and written as element pairs: even strides, 4-byte aligned pointers.
Status CheckPairs(const HeadsView& v) {
  if (v.rows * v.heads * v.head_dim == 0) return OkStatus();
  if ((v.rows > 1 && v.row_stride % 2 != 0) || (v.heads > 1 && v.head_stride % 2 != 0))
    return InvalidArgument(std::string(v.name) +
                           ": the batch and head strides must be even (it is accessed as element "
                           "pairs), found strides [" +
                           std::to_string(v.row_stride) + ", " + std::to_string(v.head_stride) + ", 1]");
  if (reinterpret_cast<uintptr_t>(v.data) % 4 != 0)
    return InvalidArgument(std::string(v.name) + ": data pointer " + PointerText(v.data) +
                           " is not 4-byte aligned (it is accessed as element pairs)");
  return OkStatus();
}

}  // namespace

StatusOr<BatchDecodeCall> CheckBatchDecode(const ops::BatchDecodePlan& plan, const TensorView& out_t,
                                           const TensorView* lse_t, const TensorView& q_t, const TensorView& k_t,
                                           const TensorView& v_t, const TensorView& kv_indptr,
                                           const TensorView& kv_indices, const TensorView& kv_last_page_len,
                                           void* workspace, size_t workspace_bytes, const char* api) {
  auto fail = [api](const Status& s) { return s.WithContext(api); };
  const ops::BatchDecodePlan::State* s = DecodePlanAccess::Get(plan);
  if (s == nullptr) return fail(InvalidArgument("plan: empty (moved from); make one with BatchDecodePlan::Create"));

  auto q = ViewHeads(q_t, "q");
  if (!q.ok()) return fail(q.status());
  auto out = ViewHeads(out_t, "out");
  if (!out.ok()) return fail(out.status());
  static constexpr const char* kShapeMeaning = "the plan's batch_size, num_qo_heads, head_dim";
  KILN_RETURN_IF_ERROR(fail(CheckHeadsShape(*q, s->batch, s->num_qo_heads, s->head_dim, kShapeMeaning)));
  KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(q_t, "q", s->dtype, "the plan's")));
  KILN_RETURN_IF_ERROR(fail(CheckHeadsShape(*out, s->batch, s->num_qo_heads, s->head_dim, kShapeMeaning)));
  KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(out_t, "out", s->dtype, "the plan's")));
  KILN_RETURN_IF_ERROR(fail(CheckPairs(*q)));
  KILN_RETURN_IF_ERROR(fail(CheckPairs(*out)));

  auto k = ViewPagedCache(k_t, "k_cache");
  if (!k.ok()) return fail(k.status());
  auto v = ViewPagedCache(v_t, "v_cache");
  if (!v.ok()) return fail(v.status());
  KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(k_t, "k_cache", s->dtype, "the plan's")));
  if (k->page_size != s->page_size || k->num_kv_heads != s->num_kv_heads || k->head_dim != s->head_dim)
    return fail(InvalidArgument("k_cache: expected shape [num_pages, " + std::to_string(s->page_size) + ", " +
                                std::to_string(s->num_kv_heads) + ", " + std::to_string(s->head_dim) +
                                "] (the plan's page_size, num_kv_heads, head_dim), found " + ShapeText(k_t)));
  KILN_RETURN_IF_ERROR(fail(CheckCachePair(*k, *v)));

  auto table = ViewPageTable(kv_indptr, kv_indices, kv_last_page_len, s->batch, s->indptr_end);
  if (!table.ok()) return fail(table.status());

  const TensorView* lse = lse_t;
  if (lse != nullptr) {
    auto rows = ViewAsRows(*lse, "lse");
    if (!rows.ok()) return fail(rows.status());
    if (lse->ndim != 2 || lse->shape[0] != s->batch || lse->shape[1] != s->num_qo_heads)
      return fail(InvalidArgument("lse: expected shape " + ListText({s->batch, s->num_qo_heads}) +
                                  " (the plan's batch_size, num_qo_heads), found " + ShapeText(*lse)));
    KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(*lse, "lse", DType::kFloat32, "log-sum-exp is fp32")));
  }

  // One device: the plan's.
  if (q_t.device.index != s->device)
    return fail(InvalidArgument("q: on " + DeviceName(q_t.device) + ", but the plan was made for cuda:" +
                                std::to_string(s->device) + " (its SM count sized the split)"));
  KILN_RETURN_IF_ERROR(fail(CheckSameDevice(q_t.device, "q",
                                            {{&out_t, "out"},
                                             {&k_t, "k_cache"},
                                             {&v_t, "v_cache"},
                                             {&kv_indptr, "kv_indptr"},
                                             {&kv_indices, "kv_indices"},
                                             {&kv_last_page_len, "kv_last_page_len"}})));
  if (lse != nullptr) KILN_RETURN_IF_ERROR(fail(CheckSameDevice(q_t.device, "q", {{lse, "lse"}})));

  // What is written shares no byte with anything else.
  const NamedTensors read = {{&q_t, "q"},
                             {&k_t, "k_cache"},
                             {&v_t, "v_cache"},
                             {&kv_indptr, "kv_indptr"},
                             {&kv_indices, "kv_indices"},
                             {&kv_last_page_len, "kv_last_page_len"}};
  for (const auto& [t, name] : read) {
    KILN_RETURN_IF_ERROR(fail(CheckDisjoint(out_t, "out", *t, name)));
    if (lse != nullptr) KILN_RETURN_IF_ERROR(fail(CheckDisjoint(*lse, "lse", *t, name)));
  }
  if (lse != nullptr) KILN_RETURN_IF_ERROR(fail(CheckDisjoint(out_t, "out", *lse, "lse")));

  NamedTensors all = read;
  all.Add(&out_t, "out");
  if (lse != nullptr) all.Add(lse, "lse");
  KILN_RETURN_IF_ERROR(fail(CheckWorkspace(workspace, workspace_bytes, s->workspace_bytes, all.items())));

  BatchDecodeCall call;
  call.api = api;
  call.plan = s;
  call.device = s->device;
  decode::KilnBatchDecodeParams& p = call.params;
  p.out = out->data;
  p.lse = lse != nullptr ? static_cast<float*>(lse->data) : nullptr;
  p.q = q->data;
  p.k_cache = k->data;
  p.v_cache = v->data;
  p.kv_indptr = table->indptr.data;
  p.kv_indices = table->indices.data;
  p.kv_last_page_len = table->last_page_len.data;
  char* ws = static_cast<char*>(workspace);
  p.partial_out = s->workspace_bytes > 0 ? reinterpret_cast<float*>(ws) : nullptr;
  p.partial_lse = s->workspace_bytes > 0 ? reinterpret_cast<float*>(ws + s->partial_lse_offset) : nullptr;
  p.q_stride_batch = q->row_stride;
  p.q_stride_head = q->head_stride;
  p.out_stride_batch = out->row_stride;
  p.out_stride_head = out->head_stride;
  p.lse_stride_batch = lse != nullptr ? lse->strides[0] : 0;
  p.k_page_stride = k->page_stride;
  p.v_page_stride = v->page_stride;
  p.num_pages = static_cast<int32_t>(k->num_pages);
  p.num_kv_heads = static_cast<int32_t>(s->num_kv_heads);
  p.num_qo_heads = static_cast<int32_t>(s->num_qo_heads);
  p.logit_scale = s->logit_scale;
  p.cap_scale = s->cap_scale;
  p.window_left = s->window_left;
  p.num_indices = static_cast<int32_t>(std::min<int64_t>(table->indices.size, INT32_MAX));
  p.schedule.num_items = static_cast<int32_t>(s->schedule.num_items);
  p.schedule.split = s->schedule.split ? 1 : 0;
  p.schedule.chunk_tokens = static_cast<int32_t>(s->schedule.chunk_tokens);
  p.schedule.batch = static_cast<int32_t>(s->batch);
  if (s->schedule.split)
    std::memcpy(p.schedule.item_begin, s->schedule.item_begin.data(), s->schedule.item_begin.size() * sizeof(uint16_t));
  return call;
}

StatusOr<AppendPagedKvCall> CheckAppendPagedKv(const TensorView& k_cache_t, const TensorView& v_cache_t,
                                               const TensorView& k_t, const TensorView& v_t,
                                               const TensorView& batch_indices_t, const TensorView& positions_t,
                                               const TensorView& kv_indptr, const TensorView& kv_indices,
                                               const TensorView& kv_last_page_len, const char* api) {
  auto fail = [api](const Status& s) { return s.WithContext(api); };
  auto kc = ViewPagedCache(k_cache_t, "k_cache");
  if (!kc.ok()) return fail(kc.status());
  auto vc = ViewPagedCache(v_cache_t, "v_cache");
  if (!vc.ok()) return fail(vc.status());
  KILN_RETURN_IF_ERROR(fail(CheckCachePair(*kc, *vc)));
  if (kc->head_dim != 64 && kc->head_dim != 128 && kc->head_dim != 256)
    return fail(InvalidArgument("k_cache: head_dim " + std::to_string(kc->head_dim) +
                                " is not supported; supported: 64, 128, 256 (shape " + ShapeText(k_cache_t) + ")"));
  if (kc->page_size > INT32_MAX)
    return fail(InvalidArgument("k_cache: page_size above 2^31-1: " + ShapeText(k_cache_t)));

  auto k = ViewHeads(k_t, "k");
  if (!k.ok()) return fail(k.status());
  auto v = ViewHeads(v_t, "v");
  if (!v.ok()) return fail(v.status());
  const int64_t nnz = k->rows;
  static constexpr const char* kMeaning = "nnz, the caches' num_kv_heads, head_dim";
  KILN_RETURN_IF_ERROR(fail(CheckHeadsShape(*k, nnz, kc->num_kv_heads, kc->head_dim, kMeaning)));
  KILN_RETURN_IF_ERROR(fail(CheckHeadsShape(*v, nnz, kc->num_kv_heads, kc->head_dim, kMeaning)));
  KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(k_t, "k", k_cache_t.dtype, "k_cache's")));
  KILN_RETURN_IF_ERROR(fail(CheckDTypeIs(v_t, "v", k_cache_t.dtype, "k_cache's")));

  auto batch_indices = ViewInt32Vector(batch_indices_t, "batch_indices");
  if (!batch_indices.ok()) return fail(batch_indices.status());
  auto positions = ViewInt32Vector(positions_t, "positions");
  if (!positions.ok()) return fail(positions.status());
  if (batch_indices->size != nnz)
    return fail(InvalidArgument("batch_indices: expected shape [" + std::to_string(nnz) +
                                "] (nnz, k's first dim), found " + ShapeText(batch_indices_t)));
  if (positions->size != nnz)
    return fail(InvalidArgument("positions: expected shape [" + std::to_string(nnz) + "] (nnz, k's first dim), found " +
                                ShapeText(positions_t)));
  auto table = ViewPageTable(kv_indptr, kv_indices, kv_last_page_len, -1, 0);
  if (!table.ok()) return fail(table.status());
  if (table->last_page_len.size > INT32_MAX - 1)
    return fail(InvalidArgument("kv_last_page_len: at most 2^31-2 requests, found " + ShapeText(kv_last_page_len)));

  KILN_RETURN_IF_ERROR(fail(CheckSameDevice(k_cache_t.device, "k_cache",
                                            {{&k_t, "k"},
                                             {&v_t, "v"},
                                             {&batch_indices_t, "batch_indices"},
                                             {&positions_t, "positions"},
                                             {&kv_indptr, "kv_indptr"},
                                             {&kv_indices, "kv_indices"},
                                             {&kv_last_page_len, "kv_last_page_len"}})));
  const std::pair<const TensorView*, const char*> read[] = {{&k_t, "k"},
                                                            {&v_t, "v"},
                                                            {&batch_indices_t, "batch_indices"},
                                                            {&positions_t, "positions"},
                                                            {&kv_indptr, "kv_indptr"},
                                                            {&kv_indices, "kv_indices"},
                                                            {&kv_last_page_len, "kv_last_page_len"}};
  for (const auto& [t, name] : read) {
    KILN_RETURN_IF_ERROR(fail(CheckDisjoint(k_cache_t, "k_cache", *t, name)));
    KILN_RETURN_IF_ERROR(fail(CheckDisjoint(v_cache_t, "v_cache", *t, name)));
  }

  AppendPagedKvCall call;
  call.api = api;
  call.dtype = k_cache_t.dtype;
  call.device = k_cache_t.device.index;
  call.head_dim = kc->head_dim;
  // A dim of size 1 constrains no vector width: use a stride that any width divides.
  auto stride = [](int64_t size, int64_t s) { return size > 1 ? s : 0; };
  call.vec = nnz == 0 ? 8
                      : ChooseVecWidth(2, kc->head_dim,
                                       {stride(nnz, k->row_stride), stride(k->heads, k->head_stride),
                                        stride(nnz, v->row_stride), stride(v->heads, v->head_stride), kc->page_stride,
                                        vc->page_stride},
                                       {k->data, v->data, kc->data, vc->data});
  decode::KilnAppendPagedKvParams& p = call.params;
  p.k_cache = kc->data;
  p.v_cache = vc->data;
  p.k = k->data;
  p.v = v->data;
  p.batch_indices = batch_indices->data;
  p.positions = positions->data;
  p.kv_indptr = table->indptr.data;
  p.kv_indices = table->indices.data;
  p.kv_last_page_len = table->last_page_len.data;
  p.k_stride_token = k->row_stride;
  p.k_stride_head = k->head_stride;
  p.v_stride_token = v->row_stride;
  p.v_stride_head = v->head_stride;
  p.k_page_stride = kc->page_stride;
  p.v_page_stride = vc->page_stride;
  p.nnz = nnz;
  p.num_indices = table->indices.size;
  p.num_kv_heads = static_cast<int32_t>(kc->num_kv_heads);
  p.page_size = static_cast<int32_t>(kc->page_size);
  p.num_pages = static_cast<int32_t>(kc->num_pages);
  p.batch = static_cast<int32_t>(table->last_page_len.size);
  return call;
}

}  // namespace kiln::client
