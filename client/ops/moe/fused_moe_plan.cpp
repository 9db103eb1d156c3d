#include "client/ops/moe/fused_moe_plan.h"

#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/moe/moe_layer_checks.h"
#include "client/ops/plan_memo.h"
#include "client/ops/row_view.h"
#include "kiln/moe/moe_contract.h"

namespace kiln::client {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

int64_t Region(int64_t bytes) { return (bytes + 255) / 256 * 256; }

static_assert(moe::kGemvDownColumns == 32,
              "kiln::ops::fused_moe_workspace_bytes and its C macro count one arrival counter per 32 columns of H");

// The decode path's launches: act by slot, then y by slot, read by the same combine (or, folded,
// combined by the down GEMV into out).
FusedMoeGemvPlan PlanGemvs(const RowView& x, const RowView& w13, const RowView& w2, const RowView& ids,
                           const RowView& weights, const RowView& out, const FusedMoeWorkspace& layout, char* base,
                           int64_t experts, int64_t intermediate, int64_t hidden, DType dtype, int device) {
  const int64_t tokens = x.rows, top_k = ids.hidden;
  FusedMoeGemvPlan g;
  g.dtype = dtype;
  g.device = device;
  g.gate_up_blocks = static_cast<unsigned>((intermediate + moe::kGemvGateUpColumns - 1) / moe::kGemvGateUpColumns);
  g.down_blocks = static_cast<unsigned>((hidden + moe::kGemvDownColumns - 1) / moe::kGemvDownColumns);
  g.expert_blocks = static_cast<unsigned>(moe::FusedMoeGemvExpertBlocks(experts, tokens * top_k));
  moe::FusedMoeGemvParams common = {};
  common.topk_ids = reinterpret_cast<const int*>(ids.data);
  common.tokens = tokens;
  common.ids_stride = ids.row_stride;
  common.experts = static_cast<int>(experts);
  common.top_k = static_cast<int>(top_k);

  g.gate_up = common;
  g.gate_up.out = base + layout.activation;
  g.gate_up.slot_to_row = reinterpret_cast<int*>(base + layout.slot_to_row);
  g.gate_up.in = x.data;
  g.gate_up.in_stride = x.row_stride;
  g.gate_up.out_stride = intermediate;
  g.gate_up.weight = w13.data;
  g.gate_up.weight_row_stride = w13.row_stride;
  g.gate_up.weight_expert_stride = 2 * intermediate * w13.row_stride;
  g.gate_up.k = static_cast<int>(hidden);
  g.gate_up.n = static_cast<int>(intermediate);

  g.down = common;
  g.down.out = base + layout.permuted_x;
  g.down.slot_to_row = nullptr;
  g.down.in = base + layout.activation;
  g.down.in_stride = intermediate;
  g.down.out_stride = hidden;
  g.down.weight = w2.data;
  g.down.weight_row_stride = w2.row_stride;
  g.down.weight_expert_stride = hidden * w2.row_stride;
  g.down.k = static_cast<int>(intermediate);
  g.down.n = static_cast<int>(hidden);

  g.foldable = MoeRowsAligned16(out);
  g.fold.arrivals = reinterpret_cast<unsigned*>(base + layout.arrivals);
  g.fold.out = out.data;
  g.fold.out_stride = out.row_stride;
  g.fold.topk_weights = reinterpret_cast<const float*>(weights.data);
  g.fold.weights_stride = weights.row_stride;
  g.fold.column_groups = 1;
  g.fold.arrival_count = static_cast<int>(g.down_blocks);

  // The one-grid form's ticket and arrival counts: 1 + expert_blocks <= E + 1 uint32, in the
  // region of moe_permute's m_indptr (int32 [E + 1]), which the decode path has no other use for.
  static_assert(sizeof(unsigned) == sizeof(int32_t), "the counters take m_indptr's entries");
  g.one_grid.counters = reinterpret_cast<unsigned*>(base + layout.m_indptr);
  g.one_grid.gate_up_blocks = static_cast<int>(g.gate_up_blocks);
  g.one_grid.down_blocks = static_cast<int>(g.down_blocks);
  g.one_grid.expert_blocks = static_cast<int>(g.expert_blocks);
  return g;
}

// A call Plan accepted on the decode path (PlanMemo, plan_memo.h): its layouts and path, the
// rows it viewed, the byte spans of its tensors (ExtentOf's, a function of the layout) and what
// the decode path's plan takes from them. The grouped path is not remembered: a prefill call's
// GPU time dwarfs its planning.
struct AcceptedDecodeCall {
  FusedMoePath path = FusedMoePath::kAuto;
  TensorLayout layouts[7];  // kArgumentCount, in ArgumentsOf's order
  RowView rows[6];          // x, w13, w2, topk_ids, topk_weights, out
  int64_t spans[6] = {};    // their ExtentOf lengths in bytes
  FusedMoeWorkspace workspace;
  int64_t experts = 0;
  int64_t intermediate = 0;
  int64_t hidden = 0;
  DType dtype = DType::kBFloat16;
  int device = 0;
  MoeUnpermutePlan unpermute;  // the combine; its pointers are the remembered call's
};
enum Argument { kX, kW13, kW2, kIds, kWeights, kOut, kWorkspace, kArgumentCount };

// The arguments in the order of AcceptedDecodeCall's arrays.
void ArgumentsOf(const FusedMoeArgs& a, const TensorView* (&t)[kArgumentCount]) {
  t[kX] = a.x;
  t[kW13] = a.w13;
  t[kW2] = a.w2;
  t[kIds] = a.topk_ids;
  t[kWeights] = a.topk_weights;
  t[kOut] = a.out;
  t[kWorkspace] = a.workspace;
}

// Every check; a decode-path plan also fills *accepted (for the memo).
StatusOr<FusedMoePlan> Plan(const FusedMoeArgs& a, FusedMoePath path, AcceptedDecodeCall* accepted) {
  if (a.out == nullptr || a.x == nullptr || a.w13 == nullptr || a.w2 == nullptr || a.topk_ids == nullptr ||
      a.topk_weights == nullptr || a.workspace == nullptr)
    return Status(StatusCode::kInternal, "PlanFusedMoe: every argument must be given");
  const TensorView& x_t = *a.x;
  if (x_t.ndim != 2) return InvalidArgument("x", "expected a 2-D tensor [T, H], found rank " + MoeRankText(x_t));
  if (x_t.dtype != DType::kBFloat16 && x_t.dtype != DType::kFloat16)
    return InvalidArgument("x", std::string("expected dtype bf16 or fp16, found ") + DTypeName(x_t.dtype));
  const DType dtype = x_t.dtype;
  KILN_ASSIGN_OR_RETURN(const RowView x, ViewAsRows(x_t, "x"));
  const int64_t tokens = x_t.shape[0], hidden = x_t.shape[1];
  if (hidden < 1 || hidden % 8 != 0)
    return InvalidArgument("x", "H (dim 1) must be a positive multiple of 8 (16-byte rows for TMA), found " +
                                    ShapeText(x_t));

  KILN_ASSIGN_OR_RETURN(const RowView w13, CheckedMoeArg(*a.w13, "w13", 3, "[E, 2I, H]", dtype));
  const int64_t experts = a.w13->shape[0], gate_up = a.w13->shape[1];
  if (experts < 1 || experts > moe::kMaxExperts)
    return InvalidArgument("w13",
                           "E (dim 0) must be 1 to " + Str(moe::kMaxExperts) + ", found shape " + ShapeText(*a.w13));
  if (gate_up < 1 || gate_up % 16 != 0)
    return InvalidArgument("w13", "dim 1 is the gate rows then the up rows, 2I with I a positive multiple of 8, "
                                  "found shape " +
                                      ShapeText(*a.w13));
  if (a.w13->shape[2] != hidden)
    return InvalidArgument("w13",
                           "expected shape [E, 2I, " + Str(hidden) + "] (H = x's dim 1), found " + ShapeText(*a.w13));
  const int64_t intermediate = gate_up / 2;

  KILN_ASSIGN_OR_RETURN(const RowView w2, CheckedMoeArg(*a.w2, "w2", 3, "[E, H, I]", dtype));
  if (a.w2->shape[0] != experts || a.w2->shape[1] != hidden || a.w2->shape[2] != intermediate)
    return InvalidArgument("w2", "expected shape [" + Str(experts) + ", " + Str(hidden) + ", " + Str(intermediate) +
                                     "] (w13's E, x's H, w13's I), found " + ShapeText(*a.w2));

  KILN_ASSIGN_OR_RETURN(const MoeLayerRows checked,
                        CheckMoeLayerRows(*a.topk_ids, *a.topk_weights, *a.out, x_t, experts, dtype));
  const RowView &ids = checked.ids, &weights = checked.weights, &out = checked.out;
  const int64_t top_k = checked.top_k;

  const TensorView& ws_t = *a.workspace;
  const FusedMoeWorkspace layout = FusedMoeWorkspaceOf(tokens, top_k, experts, hidden, intermediate);
  KILN_RETURN_IF_ERROR(CheckMoeWorkspace(ws_t, layout.bytes,
                                         "fused_moe_workspace_bytes(T " + Str(tokens) + ", top_k " + Str(top_k) +
                                             ", E " + Str(experts) + ", H " + Str(hidden) + ", I " + Str(intermediate) +
                                             ")"));

  for (const auto& [t, name] : {std::pair{a.w13, "w13"},
                                {a.w2, "w2"},
                                {a.topk_ids, "topk_ids"},
                                {a.topk_weights, "topk_weights"},
                                {a.out, "out"},
                                {a.workspace, "workspace"}})
    KILN_RETURN_IF_ERROR(CheckSameDevice(*t, name, x_t.device, "x"));
  // out is written last, from the workspace alone: it may be x itself (x was gathered before),
  // nothing else. The workspace is written from the first launch on: it shares no byte with
  // an argument.
  KILN_RETURN_IF_ERROR(CheckNoOverlap(out, x, /*same_is_ok=*/true));
  for (const RowView* other : {&w13, &w2, &ids, &weights}) KILN_RETURN_IF_ERROR(CheckNoOverlap(out, *other, false));
  const TensorView used = TensorView::Contiguous(ws_t.data, DType::kUInt8, {layout.bytes}, ws_t.device);
  for (const auto& [t, name] : {std::pair{a.x, "x"},
                                {a.w13, "w13"},
                                {a.w2, "w2"},
                                {a.topk_ids, "topk_ids"},
                                {a.topk_weights, "topk_weights"},
                                {a.out, "out"}})
    KILN_RETURN_IF_ERROR(CheckDisjoint(used, "workspace", *t, name));

  FusedMoePlan plan;
  plan.tokens = tokens;
  plan.workspace = layout;
  char* base = static_cast<char*>(ws_t.data);
  const Device device = x_t.device;
  const int64_t rows = layout.rows;
  const TensorView counts_v = TensorView::Contiguous(base + layout.expert_counts, DType::kInt32, {experts}, device);
  const TensorView indptr_v = TensorView::Contiguous(base + layout.m_indptr, DType::kInt32, {experts + 1}, device);
  const TensorView row_to_slot_v = TensorView::Contiguous(base + layout.row_to_slot, DType::kInt32, {rows}, device);
  const TensorView slot_to_row_v = TensorView::Contiguous(base + layout.slot_to_row, DType::kInt32, {tokens, top_k},
                                                          device);
  const TensorView permuted_v = TensorView::Contiguous(base + layout.permuted_x, dtype, {rows, hidden}, device);
  const TensorView act_v = TensorView::Contiguous(base + layout.activation, dtype, {rows, intermediate}, device);

  // The gate-and-up GEMM gathers x's rows itself (by row_to_slot: slot t * top_k + j is token t)
  // where x's rows suit its 16-byte copies and FusedMoeGatherX allows; else the permutation copies
  // them into the grouped layout (permuted_x) for it.
  const bool gather = FusedMoeGatherX(intermediate) && MoeRowsAligned16(x);
  const GroupedGemmGather by_slot{&row_to_slot_v, top_k};
  KILN_ASSIGN_OR_RETURN(plan.permute,
                        PlanMoePermute({&counts_v, &indptr_v, &row_to_slot_v, &slot_to_row_v,
                                        gather ? nullptr : &permuted_v, a.topk_ids, gather ? nullptr : a.x,
                                        /*align=*/1},
                                       kFusedMoePermuteStep));
  KILN_ASSIGN_OR_RETURN(plan.gate_up, PlanGroupedGemmSiluAndMul(act_v, gather ? x_t : permuted_v, *a.w13, indptr_v,
                                                                kFusedMoeGateUpStep, gather ? &by_slot : nullptr));
  // The experts' outputs over the gathered rows (dead after the first GEMM).
  KILN_ASSIGN_OR_RETURN(plan.down, PlanGroupedGemm(permuted_v, act_v, *a.w2, indptr_v, kFusedMoeDownStep));
  KILN_ASSIGN_OR_RETURN(plan.unpermute,
                        PlanMoeUnpermute({a.out, &permuted_v, &slot_to_row_v, a.topk_weights}, kFusedMoeCombineStep));

  const bool gemv_possible = FusedMoeGemvSlotsFit(tokens, top_k) && MoeRowsAligned16(x) && MoeRowsAligned16(w13) &&
                             MoeRowsAligned16(w2);
  plan.gemv = gemv_possible && (path == FusedMoePath::kGemv ||
                                (path == FusedMoePath::kAuto && FusedMoeGemvByDefault(tokens, top_k, experts)));
  if (plan.gemv) {
    plan.gemvs = PlanGemvs(x, w13, w2, ids, weights, out, layout, base, experts, intermediate, hidden, dtype,
                           device.index);
    AcceptedDecodeCall& c = *accepted;
    c.path = path;
    const TensorView* t[kArgumentCount];
    ArgumentsOf(a, t);
    for (int i = 0; i < kArgumentCount; ++i) c.layouts[i] = TensorLayout::Of(*t[i]);
    const RowView* rows[] = {&x, &w13, &w2, &ids, &weights, &out};
    for (int i = 0; i < kWorkspace; ++i) {
      c.rows[i] = *rows[i];
      const ByteExtent e = ExtentOf(*t[i]);
      c.spans[i] = static_cast<int64_t>(e.end - e.begin);
    }
    c.workspace = layout;
    c.experts = experts;
    c.intermediate = intermediate;
    c.hidden = hidden;
    c.dtype = dtype;
    c.device = device.index;
    c.unpermute = plan.unpermute;
  }
  return plan;
}

// A call with a remembered decode-path call's layouts and path, and pointers of its own: the
// checks of Plan that read pointers, then the decode path's plan for these pointers. Every other
// check of Plan reads only the layouts, which matched. False when a pointer check would refuse
// (or might: the combine's access width changed): the whole validation then answers.
//   Plan's pointer checks, and where they are here: ViewAsRows of the six tensors (Rebind); the
// workspace's pointer (NULL, 256-byte alignment); out against x (in place allowed) and the four
// others; the workspace's bytes against all six; the decode path's 16-byte rows of x, w13 and w2,
// which imply the grouped GEMMs' TMA checks of w13 and w2. The steps' own overlap checks are of
// workspace regions (disjoint by construction) and of out against topk_weights and the
// workspace, checked here. So the grouped path's steps, not launched on this path, are not
// planned again: the plan leaves permute, gate_up and down empty.
bool PlanFromMemo(AcceptedDecodeCall& c, const FusedMoeArgs& a, FusedMoePlan* plan) {
  const TensorView* t[kArgumentCount];
  ArgumentsOf(a, t);
  RowView& x = c.rows[kX];
  RowView& w13 = c.rows[kW13];
  RowView& w2 = c.rows[kW2];
  RowView& out = c.rows[kOut];
  for (int i = 0; i < kWorkspace; ++i)
    if (!c.rows[i].Rebind(*t[i])) return false;
  const uintptr_t ws = reinterpret_cast<uintptr_t>(a.workspace->data);
  if (ws == 0 || ws % 256 != 0) return false;
  if (RowsOverlap(out, x, /*same_is_ok=*/true)) return false;
  for (int i : {kW13, kW2, kIds, kWeights})
    if (RowsOverlap(out, c.rows[i], false)) return false;
  const uintptr_t ws_end = ws + static_cast<uintptr_t>(c.workspace.bytes);
  for (int i = 0; i < kWorkspace; ++i)
    if (SpanMeets(t[i]->data, c.spans[i], ws, ws_end)) return false;
  if (!MoeRowsAligned16(x) || !MoeRowsAligned16(w13) || !MoeRowsAligned16(w2)) return false;

  char* base = reinterpret_cast<char*>(ws);
  // The combine over this call's pointers (its access width reads out's and the expert rows').
  MoeUnpermutePlan unpermute = c.unpermute;
  if (!RebindMoeUnpermute(&unpermute, out.data, base + c.workspace.permuted_x,
                          reinterpret_cast<const int*>(base + c.workspace.slot_to_row),
                          reinterpret_cast<const float*>(c.rows[kWeights].data)))
    return false;

  plan->tokens = x.rows;
  plan->workspace = c.workspace;
  plan->gemv = true;
  plan->gemvs = PlanGemvs(x, w13, w2, c.rows[kIds], c.rows[kWeights], out, c.workspace, base, c.experts, c.intermediate,
                          c.hidden, c.dtype, c.device);
  plan->unpermute = unpermute;
  return true;
}

}  // namespace

FusedMoeWorkspace FusedMoeWorkspaceOf(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                                      int64_t intermediate) {
  FusedMoeWorkspace w;
  w.rows = tokens * top_k;
  w.expert_counts = 0;
  w.m_indptr = w.expert_counts + Region(4 * experts);
  w.row_to_slot = w.m_indptr + Region(4 * (experts + 1));
  w.slot_to_row = w.row_to_slot + Region(4 * w.rows);
  w.permuted_x = w.slot_to_row + Region(4 * w.rows);
  w.activation = w.permuted_x + Region(2 * w.rows * hidden);
  w.arrivals = w.activation + Region(2 * w.rows * intermediate);
  w.bytes = w.arrivals + Region(4 * ((hidden + moe::kGemvDownColumns - 1) / moe::kGemvDownColumns));
  return w;
}

bool FusedMoeGemvSlotsFit(int64_t tokens, int64_t top_k) {
  return tokens >= 1 && top_k >= 1 && tokens * top_k <= moe::kMaxGemvSlots;
}

bool FusedMoeGemvByDefault(int64_t tokens, int64_t top_k, int64_t experts) {
  return FusedMoeGemvSlotsFit(tokens, top_k) && tokens * top_k <= experts;
}

StatusOr<FusedMoePlan> PlanFusedMoe(const FusedMoeArgs& args, const char* api, FusedMoePath path) {
  const TensorView* t[kArgumentCount];
  ArgumentsOf(args, t);
  thread_local PlanMemo<AcceptedDecodeCall> memo;
  return PlanDecodeCallWithMemo<FusedMoePlan>(
      memo, t, path, api, [&](AcceptedDecodeCall& seen, FusedMoePlan* plan) { return PlanFromMemo(seen, args, plan); },
      [&](AcceptedDecodeCall* accepted) { return Plan(args, path, accepted); });
}

StatusOr<FusedMoePlan> PlanFusedMoeFully(const FusedMoeArgs& args, const char* api, FusedMoePath path) {
  AcceptedDecodeCall accepted;
  auto plan = Plan(args, path, &accepted);
  if (!plan.ok()) return plan.status().WithContext(api);
  return plan;
}

}  // namespace kiln::client
