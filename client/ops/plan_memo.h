// PlanMemo: a thread's memo of an op's last accepted layouts, so that a repeat call does not
// check again what it checked before. An op's validation is, but for the data pointers, a
// function of its tensors' layouts (dtype, rank, shape, strides, device) and its scalars; a
// call whose layouts and scalars match a remembered accepted call reruns only the checks that
// read pointers (RowView::Rebind, RowsOverlap, the vector width) and takes the rest of the
// plan from the memo. Any pointer check that fails sends the call through the whole validation,
// which names the problem as it always does, so a memo changes no answer, only its cost (the
// op-call overhead, docs/benchmarking.md; tests compare both paths on random calls).
#pragma once

#include <cstdint>

#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// What validation reads of a tensor besides its data pointer.
struct TensorLayout {
  DType dtype = DType::kFloat32;
  int ndim = 0;
  Device device;
  int64_t shape[kMaxTensorDims] = {};
  int64_t strides[kMaxTensorDims] = {};

  // `t`'s layout; its rank must be 0..kMaxTensorDims (an accepted tensor's always is).
  static TensorLayout Of(const TensorView& t) {
    TensorLayout l;
    l.dtype = t.dtype;
    l.ndim = t.ndim;
    l.device = t.device;
    for (int d = 0; d < t.ndim; ++d) {
      l.shape[d] = t.shape[d];
      l.strides[d] = t.strides[d];
    }
    return l;
  }
  // True when `t` has this layout, whatever its pointer (and whatever its rank: a rank outside
  // the range never matches, since no remembered layout has one).
  bool Matches(const TensorView& t) const {
    if (t.dtype != dtype || t.ndim != ndim || !(t.device == device)) return false;
    for (int d = 0; d < ndim; ++d)
      if (t.shape[d] != shape[d] || t.strides[d] != strides[d]) return false;
    return true;
  }
};

// A few remembered calls (an `Entry` each: the layouts, the scalars, what the op derived from
// them), replaced in turn: a model interleaves calls of one op on a few shapes (Qwen3's q and k
// norms beside the hidden-size norms), which a single entry would make miss every time.
// Entries are plain data, so a thread_local PlanMemo needs no constructor or destructor run.
template <typename Entry, int kSlots = 4>
class PlanMemo {
 public:
  // The first remembered entry `matches` accepts, or null.
  template <typename Match>
  Entry* Find(Match&& matches) {
    for (int i = 0; i < used_; ++i)
      if (matches(entries_[i])) return &entries_[i];
    return nullptr;
  }
  // The entry to fill with a newly accepted call (the oldest once all are used).
  Entry& Next() {
    Entry& e = entries_[next_];
    next_ = (next_ + 1) % kSlots;
    if (used_ < kSlots) ++used_;
    return e;
  }

 private:
  Entry entries_[kSlots] = {};
  int used_ = 0;
  int next_ = 0;
};

// Whether `span` bytes from `data` (a tensor's ExtentOf length, remembered from its layout) meet
// the bytes [begin, end): CheckDisjoint's question, without the message, for a memo's pointer
// checks. An empty span meets nothing.
inline bool SpanMeets(const void* data, int64_t span, uintptr_t begin, uintptr_t end) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(data);
  return span > 0 && begin < end && at < end && begin < at + static_cast<uintptr_t>(span);
}

// The remembered entry whose `path` and `layouts` (TensorLayout[N]) match a call's choice `path`
// and tensors `t`, or null (also when a tensor is missing: the whole validation names it): the
// lookup of the plans that remember a call by all its tensors' layouts and one choice (fused_moe's
// and fused_moe_fp8's decode paths).
template <typename Entry, int kSlots, int N, typename Choice>
Entry* FindByPathAndLayouts(PlanMemo<Entry, kSlots>& memo, const TensorView* const (&t)[N], Choice path) {
  for (const TensorView* v : t)
    if (v == nullptr) return nullptr;
  return memo.Find([&](const Entry& e) {
    if (e.path != path) return false;
    for (int i = 0; i < N; ++i)
      if (!e.layouts[i].Matches(*t[i])) return false;
    return true;
  });
}

// The plan of a layer that remembers its decode-path calls by their layouts and path (fused_moe's
// and fused_moe_fp8's): a remembered call's plan rebuilt by `from_memo(entry, &plan)` when its
// pointer checks pass, else the whole validation `fully(&entry)` (errors named under `api`), whose
// accepted decode-path call is remembered. The grouped path is never remembered.
template <typename Plan, typename Entry, int kSlots, int N, typename Choice, typename FromMemo, typename Fully>
StatusOr<Plan> PlanDecodeCallWithMemo(PlanMemo<Entry, kSlots>& memo, const TensorView* const (&t)[N], Choice path,
                                      const char* api, FromMemo&& from_memo, Fully&& fully) {
  if (Entry* seen = FindByPathAndLayouts(memo, t, path)) {
    Plan plan;
    if (from_memo(*seen, &plan)) return plan;
  }
  Entry accepted;
  StatusOr<Plan> plan = fully(&accepted);
  if (!plan.ok()) return plan.status().WithContext(api);
  if (plan->gemv) memo.Next() = accepted;
  return plan;
}

}  // namespace kiln::client
