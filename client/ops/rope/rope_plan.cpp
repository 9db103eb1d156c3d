#include "client/ops/rope/rope_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/plan_memo.h"
#include "client/ops/row_view.h"
#include "client/ops/vec_width.h"

namespace kiln::client {
namespace {

// q or k as [tokens, heads, head_dim] with the head dim contiguous.
struct HeadsView {
  const char* name = "";
  const TensorView* tensor = nullptr;
  char* data = nullptr;
  size_t element_size = 0;
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

StatusOr<HeadsView> ViewAsHeads(const TensorView& t, const char* name) {
  const std::string n(name);
  if (t.ndim != 3)
    return InvalidArgument(n + ": expected a 3-D tensor [tokens, heads, head_dim], found rank " +
                           std::to_string(t.ndim) +
                           (t.ndim >= 1 && t.ndim <= kMaxTensorDims ? " " + ShapeText(t) : ""));
  if (t.device.type != DeviceType::kCUDA)
    return InvalidArgument(n + ": expected a CUDA device tensor, found one on " + DeviceName(t.device));
  if (t.device.index < 0)
    return InvalidArgument(n + ": device ordinal " + std::to_string(t.device.index) + " is negative");
  for (int d = 0; d < 3; ++d) {
    if (t.shape[d] < 0)
      return InvalidArgument(n + ": dim " + std::to_string(d) + " has negative size " + std::to_string(t.shape[d]) +
                             " (shape " + ShapeText(t) + ")");
    if (t.strides[d] < 0)
      return InvalidArgument(n + ": dim " + std::to_string(d) + " has negative stride " + std::to_string(t.strides[d]) +
                             " (strides " + StridesText(t) + "); only non-negative strides are supported");
  }
  if (t.shape[2] > 1 && t.strides[2] != 1)
    return InvalidArgument(n + ": the head dim (dim 2) must be contiguous (stride 1), found stride " +
                           std::to_string(t.strides[2]) + " in " + t.Describe());
  HeadsView v;
  v.name = name;
  v.tensor = &t;
  v.data = static_cast<char*>(t.data);
  v.element_size = DTypeSize(t.dtype);
  v.tokens = t.shape[0];
  v.heads = t.shape[1];
  v.head_dim = t.shape[2];
  v.token_stride = t.strides[0];
  v.head_stride = t.strides[1];
  if (t.numel() > 0 && v.data == nullptr)
    return InvalidArgument(n + ": data is NULL, but the tensor " + ShapeText(t) + " is not empty");
  if (v.element_size > 1 && reinterpret_cast<uintptr_t>(v.data) % v.element_size != 0)
    return InvalidArgument(n + ": data pointer " + PointerText(v.data) + " is not aligned to " +
                           std::to_string(v.element_size) + " bytes (the size of one " + DTypeName(t.dtype) +
                           " element)");
  return v;
}

// The elements one token of `v` writes, as one row of a RowView: from its first head's start
// to the end of the rotated part of its last head. Rows are token_stride apart.
RowView WrittenRows(const HeadsView& v, int64_t rotary_dim) {
  RowView r;
  r.name = v.name;
  r.tensor = v.tensor;
  r.data = v.data;
  r.element_size = v.element_size;
  r.rows = v.tokens;
  r.hidden = v.heads > 0 ? (v.heads - 1) * v.head_stride + rotary_dim : 0;
  r.row_stride = v.tokens > 1 ? v.token_stride : r.hidden;
  return r;
}

// No two (token, head) rows of `v` may share a rotated element: the smaller stride (of a dim
// with more than one entry) must step over rotary_dim elements, the larger over all the rows
// of the smaller.
Status CheckRowsDisjoint(const HeadsView& v, int64_t rotary_dim) {
  struct Dim {
    const char* what;
    int64_t size, stride;
  };
  Dim dims[2] = {{"token", v.tokens, v.token_stride}, {"head", v.heads, v.head_stride}};
  if (dims[0].size <= 1 || dims[1].size <= 1) {
    const Dim& d = dims[0].size > 1 ? dims[0] : dims[1];
    if (d.size <= 1 || d.stride >= rotary_dim) return OkStatus();
    return InvalidArgument(std::string(v.name) + ": its " + d.what + " stride " + std::to_string(d.stride) +
                           " is less than rotary_dim " + std::to_string(rotary_dim) + ", so the rotated parts of two " +
                           d.what + "s overlap; a tensor the op writes needs rows that do not overlap");
  }
  if (dims[0].stride > dims[1].stride) std::swap(dims[0], dims[1]);
  if (dims[0].stride >= rotary_dim && dims[1].stride >= (dims[0].size - 1) * dims[0].stride + rotary_dim)
    return OkStatus();
  return InvalidArgument(std::string(v.name) + ": its rotated parts overlap (token stride " +
                         std::to_string(v.token_stride) + ", head stride " + std::to_string(v.head_stride) + ", " +
                         std::to_string(v.tokens) + " tokens, " + std::to_string(v.heads) + " heads, rotary_dim " +
                         std::to_string(rotary_dim) +
                         "); a tensor the op writes needs (token, head) rows that do not overlap");
}

// What a plan read of its tensors, for the memo: the rows q and k write, positions' and the
// cache's rows, and the vector width the layouts allow before the pointers narrow it.
struct RopeRows {
  RowView q;
  RowView k;
  RowView positions;
  RowView cache;  // apply_rope_with_cos_sin_cache only
  int layout_vec = 1;
};

// The vector width the cache allows as well: the kernel reads it min(vec, 4) floats at a time,
// so its pointer and row stride must allow that too.
int NarrowVecToCache(int vec, const RowView& cache) {
  while (vec > 1) {
    const int64_t floats = std::min(vec, 4);
    const bool pointer_ok = cache.begin() % static_cast<uintptr_t>(floats * 4) == 0;
    const bool stride_ok = cache.rows <= 1 || cache.row_stride % floats == 0;
    if (pointer_ok && stride_ok) break;
    vec /= 2;
  }
  return vec;
}

// What both ops check: q, k, positions and their relations. `rotary_dim` is the resolved
// value (options or the cache), `rotary_from` names where it came from for messages. The rows
// viewed go to `rows`.
StatusOr<RopePlan> PlanCommon(RopeOp op, const TensorView& q_t, const TensorView& k_t, const TensorView& p_t,
                              int64_t rotary_dim, const char* rotary_from, bool interleaved, RopeRows& rows) {
  KILN_ASSIGN_OR_RETURN(auto q, ViewAsHeads(q_t, "q"));
  KILN_ASSIGN_OR_RETURN(auto k, ViewAsHeads(k_t, "k"));

  if (q_t.dtype != DType::kFloat16 && q_t.dtype != DType::kBFloat16)
    return InvalidArgument(std::string("q: dtype ") + DTypeName(q_t.dtype) +
                           " is not supported; expected fp16 or bf16");
  if (k_t.dtype != q_t.dtype)
    return InvalidArgument(std::string("k: expected dtype ") + DTypeName(q_t.dtype) + " (q's), found " +
                           DTypeName(k_t.dtype));
  if (k.tokens != q.tokens)
    return InvalidArgument("k: expected " + std::to_string(q.tokens) + " tokens (q's dim 0), found " +
                           std::to_string(k.tokens) + " in shape " + ShapeText(k_t));
  if (k.head_dim != q.head_dim)
    return InvalidArgument("k: expected head_dim " + std::to_string(q.head_dim) + " (q's dim 2), found " +
                           std::to_string(k.head_dim) + " in shape " + ShapeText(k_t));
  for (const HeadsView* v : {&q, &k}) {
    if (v->heads > int64_t{rope::kMaxHeads})
      return InvalidArgument(std::string(v->name) + ": at most " + std::to_string(int64_t{rope::kMaxHeads}) +
                             " heads, found " + std::to_string(v->heads));
  }
  KILN_RETURN_IF_ERROR(CheckSameDevice(k_t, "k", q_t.device, "q"));

  // positions [tokens], int32 or int64, contiguous.
  if (p_t.ndim != 1)
    return InvalidArgument("positions: expected a 1-D tensor [tokens] = [" + std::to_string(q.tokens) +
                           "], found rank " + std::to_string(p_t.ndim) +
                           (p_t.ndim >= 1 && p_t.ndim <= kMaxTensorDims ? " " + ShapeText(p_t) : ""));
  if (p_t.dtype != DType::kInt32 && p_t.dtype != DType::kInt64)
    return InvalidArgument(std::string("positions: dtype ") + DTypeName(p_t.dtype) +
                           " is not supported; expected int32 or int64 (token positions are integers)");
  KILN_ASSIGN_OR_RETURN(auto p, ViewAsRows(p_t, "positions"));
  if (p_t.shape[0] != q.tokens)
    return InvalidArgument("positions: expected shape [" + std::to_string(q.tokens) + "] (q's tokens), found " +
                           ShapeText(p_t));
  KILN_RETURN_IF_ERROR(CheckSameDevice(p_t, "positions", q_t.device, "q"));

  if (rotary_dim % 2 != 0 || rotary_dim < 2 || rotary_dim > q.head_dim || rotary_dim > int64_t{rope::kMaxRotaryDim})
    return InvalidArgument(std::string(rotary_from) + ": expected an even value in 2.." +
                           std::to_string(std::min(q.head_dim, int64_t{rope::kMaxRotaryDim})) + " (at most head_dim " +
                           std::to_string(q.head_dim) + " and " + std::to_string(int64_t{rope::kMaxRotaryDim}) +
                           "), found " + std::to_string(rotary_dim));

  KILN_RETURN_IF_ERROR(CheckRowsDisjoint(q, rotary_dim));
  KILN_RETURN_IF_ERROR(CheckRowsDisjoint(k, rotary_dim));
  const RowView q_rows = WrittenRows(q, rotary_dim), k_rows = WrittenRows(k, rotary_dim);
  KILN_RETURN_IF_ERROR(CheckNoOverlap(q_rows, k_rows, false));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(q_rows, p, false));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(k_rows, p, false));

  RopePlan plan;
  plan.op = op;
  plan.dtype = q_t.dtype;
  plan.pos_dtype = p_t.dtype;
  plan.device = q_t.device.index;
  plan.tokens = q.tokens;
  plan.q_heads = q.heads;
  plan.k_heads = k.heads;
  plan.head_dim = q.head_dim;
  plan.rotary_dim = rotary_dim;
  plan.interleaved = interleaved;
  plan.q = q.data;
  plan.k = k.data;
  plan.positions = p.data;
  plan.q_token_stride = q.token_stride;
  plan.q_head_stride = q.head_stride;
  plan.k_token_stride = k.token_stride;
  plan.k_head_stride = k.head_stride;
  // A stride of a dim with one entry is never stepped over, so it does not limit the vector.
  auto used = [](int64_t size, int64_t stride) { return size > 1 ? stride : 0; };
  rows.layout_vec = ChooseVecWidth(q.element_size, rotary_dim / 2,
                                   {used(q.tokens, q.token_stride), used(q.heads, q.head_stride),
                                    used(k.tokens, k.token_stride), used(k.heads, k.head_stride)},
                                   {});
  plan.vec = NarrowVecWidthToPointers(rows.layout_vec, q.element_size,
                                      {q.heads > 0 ? plan.q : nullptr, k.heads > 0 ? plan.k : nullptr});
  rows.q = q_rows;
  rows.k = k_rows;
  rows.positions = p;
  return plan;
}

Status CheckPositiveFinite(const char* name, double value) {
  if (std::isfinite(value) && value > 0) return OkStatus();
  return InvalidArgument(std::string(name) + ": expected a finite value > 0, found " + NumberText(value));
}

// apply_rope's plan with every check; its rows go to `rows`.
StatusOr<RopePlan> PlanApplyRopeFully(const TensorView& q, const TensorView& k, const TensorView& positions,
                                      const ops::RopeOptions& options, const char* api, RopeRows& rows) {
  auto plan = [&]() -> StatusOr<RopePlan> {
    if (options.rotary_dim < 0)
      return InvalidArgument("rotary_dim: expected 0 (the head dim) or an even value in 2..min(head_dim, " +
                             std::to_string(int64_t{rope::kMaxRotaryDim}) + "), found " +
                             std::to_string(options.rotary_dim));
    // Only q's rank is needed to resolve 0; ViewAsHeads reports a bad one first.
    const int64_t head_dim = q.ndim == 3 ? q.shape[2] : 0;
    const int64_t rotary_dim = options.rotary_dim == 0 ? head_dim : options.rotary_dim;
    const char* from = options.rotary_dim == 0 ? "rotary_dim (0: the head dim)" : "rotary_dim";
    KILN_ASSIGN_OR_RETURN(auto plan,
                          PlanCommon(RopeOp::kApplyRope, q, k, positions, rotary_dim, from, options.interleaved, rows));
    KILN_RETURN_IF_ERROR(CheckPositiveFinite("theta", options.theta));
    plan.log2_theta = std::log2(options.theta);
    if (options.llama31.has_value()) {
      const ops::Llama31RopeScaling& s = *options.llama31;
      KILN_RETURN_IF_ERROR(CheckPositiveFinite("llama31.factor", s.factor));
      KILN_RETURN_IF_ERROR(CheckPositiveFinite("llama31.low_freq_factor", s.low_freq_factor));
      if (!std::isfinite(s.high_freq_factor) || !(s.high_freq_factor > s.low_freq_factor))
        return InvalidArgument("llama31.high_freq_factor: expected a finite value > low_freq_factor (" +
                               NumberText(s.low_freq_factor) + "), found " + NumberText(s.high_freq_factor));
      if (s.original_max_position <= 0)
        return InvalidArgument("llama31.original_max_position: expected a value > 0, found " +
                               std::to_string(s.original_max_position));
      plan.factor = s.factor;
      plan.low_freq_factor = s.low_freq_factor;
      plan.high_freq_factor = s.high_freq_factor;
      plan.original_max_position = static_cast<double>(s.original_max_position);
    }
    return plan;
  }();
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

// apply_rope_with_cos_sin_cache's plan with every check; its rows go to `rows`.
StatusOr<RopePlan> PlanApplyRopeWithCosSinCacheFully(const TensorView& q, const TensorView& k,
                                                     const TensorView& positions, const TensorView& cache_t,
                                                     bool interleaved, const char* api, RopeRows& rows) {
  auto plan = [&]() -> StatusOr<RopePlan> {
    if (cache_t.ndim != 2)
      return InvalidArgument("cos_sin_cache: expected a 2-D tensor [max_position, rotary_dim], found rank " +
                             std::to_string(cache_t.ndim) +
                             (cache_t.ndim >= 1 && cache_t.ndim <= kMaxTensorDims ? " " + ShapeText(cache_t) : ""));
    KILN_ASSIGN_OR_RETURN(auto cache, ViewAsRows(cache_t, "cos_sin_cache"));
    if (cache_t.dtype != DType::kFloat32)
      return InvalidArgument(std::string("cos_sin_cache: dtype ") + DTypeName(cache_t.dtype) +
                             " is not supported; expected fp32");
    KILN_ASSIGN_OR_RETURN(auto plan, PlanCommon(RopeOp::kApplyRopeWithCosSinCache, q, k, positions, cache.hidden,
                                                "cos_sin_cache: its dim 1 (rotary_dim)", interleaved, rows));
    KILN_RETURN_IF_ERROR(CheckSameDevice(cache_t, "cos_sin_cache", q.device, "q"));
    // The rows q and k write (PlanCommon viewed them) must not overlap the cache.
    KILN_RETURN_IF_ERROR(CheckNoOverlap(rows.q, cache, false));
    KILN_RETURN_IF_ERROR(CheckNoOverlap(rows.k, cache, false));
    plan.cos_sin_cache = cache.data;
    plan.max_position = cache.rows;
    plan.cache_stride = cache.row_stride;
    plan.vec = NarrowVecToCache(plan.vec, cache);
    rows.cache = cache;
    return plan;
  }();
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

// The scalars a rope plan depends on besides its tensors: apply_rope's options (the cache op:
// interleaved alone). Doubles compare exactly; a NaN is never accepted, so never remembered.
struct RopeScalars {
  RopeOp op = RopeOp::kApplyRope;
  int64_t rotary_dim = 0;
  bool interleaved = false;
  double theta = 0;
  bool llama31 = false;
  double factor = 0;
  double low_freq_factor = 0;
  double high_freq_factor = 0;
  int64_t original_max_position = 0;
  bool operator==(const RopeScalars&) const = default;
};

RopeScalars ScalarsOf(const ops::RopeOptions& o) {
  RopeScalars s;
  s.op = RopeOp::kApplyRope;
  s.rotary_dim = o.rotary_dim;
  s.interleaved = o.interleaved;
  s.theta = o.theta;
  s.llama31 = o.llama31.has_value();
  if (s.llama31) {
    s.factor = o.llama31->factor;
    s.low_freq_factor = o.llama31->low_freq_factor;
    s.high_freq_factor = o.llama31->high_freq_factor;
    s.original_max_position = o.llama31->original_max_position;
  }
  return s;
}

// A call a rope plan accepted (PlanMemo): its scalars, layouts, rows and plan.
struct AcceptedRopeCall {
  RopeScalars scalars;
  TensorLayout q_layout;
  TensorLayout k_layout;
  TensorLayout positions_layout;
  TensorLayout cache_layout;  // apply_rope_with_cos_sin_cache only
  RopeRows rows;
  RopePlan plan;
};

thread_local PlanMemo<AcceptedRopeCall> g_rope_memo;

// The remembered call's plan for these tensors of its layouts, once the checks that read
// pointers pass again (`cache`: null for apply_rope); false when one fails.
bool Replan(AcceptedRopeCall& c, const TensorView& q, const TensorView& k, const TensorView& positions,
            const TensorView* cache, RopePlan* plan) {
  RopeRows& r = c.rows;
  if (!r.q.Rebind(q) || !r.k.Rebind(k) || !r.positions.Rebind(positions)) return false;
  if (cache != nullptr && !r.cache.Rebind(*cache)) return false;
  if (RowsOverlap(r.q, r.k, false) || RowsOverlap(r.q, r.positions, false) || RowsOverlap(r.k, r.positions, false))
    return false;
  if (cache != nullptr && (RowsOverlap(r.q, r.cache, false) || RowsOverlap(r.k, r.cache, false))) return false;
  *plan = c.plan;
  plan->q = q.data;
  plan->k = k.data;
  plan->positions = positions.data;
  plan->vec = NarrowVecWidthToPointers(r.layout_vec, r.q.element_size,
                                       {plan->q_heads > 0 ? plan->q : nullptr, plan->k_heads > 0 ? plan->k : nullptr});
  if (cache != nullptr) {
    plan->cos_sin_cache = cache->data;
    plan->vec = NarrowVecToCache(plan->vec, r.cache);
  }
  return true;
}

}  // namespace

StatusOr<RopePlan> PlanApplyRope(const TensorView& q, const TensorView& k, const TensorView& positions,
                                 const ops::RopeOptions& options, const char* api) {
  const RopeScalars scalars = ScalarsOf(options);
  AcceptedRopeCall* seen = g_rope_memo.Find([&](const AcceptedRopeCall& c) {
    return c.scalars == scalars && c.q_layout.Matches(q) && c.k_layout.Matches(k) &&
           c.positions_layout.Matches(positions);
  });
  RopePlan plan;
  if (seen != nullptr && Replan(*seen, q, k, positions, nullptr, &plan)) {
    plan.api = api;
    return plan;
  }
  RopeRows rows;
  auto full = PlanApplyRopeFully(q, k, positions, options, api, rows);
  if (full.ok())
    g_rope_memo.Next() = AcceptedRopeCall{
        scalars, TensorLayout::Of(q), TensorLayout::Of(k), TensorLayout::Of(positions), TensorLayout{}, rows, *full};
  return full;
}

StatusOr<RopePlan> PlanApplyRopeWithCosSinCache(const TensorView& q, const TensorView& k, const TensorView& positions,
                                                const TensorView& cos_sin_cache, bool interleaved, const char* api) {
  RopeScalars scalars;
  scalars.op = RopeOp::kApplyRopeWithCosSinCache;
  scalars.interleaved = interleaved;
  AcceptedRopeCall* seen = g_rope_memo.Find([&](const AcceptedRopeCall& c) {
    return c.scalars == scalars && c.q_layout.Matches(q) && c.k_layout.Matches(k) &&
           c.positions_layout.Matches(positions) && c.cache_layout.Matches(cos_sin_cache);
  });
  RopePlan plan;
  if (seen != nullptr && Replan(*seen, q, k, positions, &cos_sin_cache, &plan)) {
    plan.api = api;
    return plan;
  }
  RopeRows rows;
  auto full = PlanApplyRopeWithCosSinCacheFully(q, k, positions, cos_sin_cache, interleaved, api, rows);
  if (full.ok())
    g_rope_memo.Next() = AcceptedRopeCall{scalars,
                                          TensorLayout::Of(q),
                                          TensorLayout::Of(k),
                                          TensorLayout::Of(positions),
                                          TensorLayout::Of(cos_sin_cache),
                                          rows,
                                          *full};
  return full;
}

StatusOr<RopePlan> PlanRopeFully(const TensorView& q, const TensorView& k, const TensorView& positions,
                                 const ops::RopeOptions& options, const char* api) {
  RopeRows rows;
  return PlanApplyRopeFully(q, k, positions, options, api, rows);
}

StatusOr<RopePlan> PlanRopeWithCosSinCacheFully(const TensorView& q, const TensorView& k, const TensorView& positions,
                                                const TensorView& cos_sin_cache, bool interleaved, const char* api) {
  RopeRows rows;
  return PlanApplyRopeWithCosSinCacheFully(q, k, positions, cos_sin_cache, interleaved, api, rows);
}

int64_t RopeHeadGroups(int64_t tokens, int64_t threads_per_token, int64_t heads) {
  if (heads <= 1 || tokens <= 0 || threads_per_token <= 0) return 1;
  const int64_t token_threads = tokens * threads_per_token;
  if (token_threads >= kRopeTargetThreads) return 1;  // every thread may take every head
  // token_threads * heads < 2^18 * 2^17: no overflow.
  const int64_t heads_per_thread = std::clamp<int64_t>(token_threads * heads / kRopeTargetThreads, 1, heads);
  return std::min<int64_t>((heads + heads_per_thread - 1) / heads_per_thread, int64_t{rope::kMaxGridY});
}

}  // namespace kiln::client
