#include "client/ops/moe/fused_moe_fp8_plan.h"

#include <algorithm>
#include <climits>
#include <string>
#include <utility>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/gemm/grouped_gemm_ops.h"
#include "client/ops/moe/moe_layer_checks.h"
#include "client/ops/plan_memo.h"
#include "client/ops/row_view.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/ops/moe.h"

namespace kiln::client {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

int64_t Region(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// A weight's scales: [E, ceil(rows / 128), ceil(columns / 128)] fp32, the weight's 128 x 128 blocks.
Status CheckScales(const TensorView& t, const char* name, const char* weight, int64_t experts, int64_t rows,
                   int64_t columns) {
  const int64_t rb = gemm::Fp8ScaleBlocks(rows), cb = gemm::Fp8ScaleBlocks(columns);
  const std::string want = "[" + Str(experts) + ", " + Str(rb) + ", " + Str(cb) + "] (one per 128 x 128 block of " +
                           weight + ")";
  KILN_ASSIGN_OR_RETURN(const RowView v, CheckedMoeArg(t, name, 3, want, DType::kFloat32));
  (void)v;
  if (t.shape[0] != experts || t.shape[1] != rb || t.shape[2] != cb)
    return InvalidArgument(name, "expected shape " + want + ", found " + ShapeText(t));
  return OkStatus();
}

// One quantizing launch over `rows` rows of `columns` columns: its parameter and grid, a warp's
// passes as the contract's rule gives them for the path (FusedMoeFp8QuantPasses).
FusedMoeFp8QuantizePlan QuantizeLaunch(bool decode_path, void* q, float* scales, const void* in, int64_t in_stride,
                                       int64_t rows, int64_t columns, const int* row_to_slot, const int* m_indptr,
                                       int64_t top_k, int64_t experts) {
  FusedMoeFp8QuantizePlan plan;
  moe::FusedMoeFp8QuantParams& p = plan.params;
  p.q = q;
  p.scales = scales;
  p.in = in;
  p.row_to_slot = row_to_slot;
  p.m_indptr = m_indptr;
  p.rows = rows;
  p.in_stride = in_stride;
  p.q_stride = columns;
  p.scale_stride = gemm::Fp8ScaleBlocks(columns);
  p.columns = static_cast<int>(columns);
  p.top_k = static_cast<int>(top_k);
  p.experts = static_cast<int>(experts);
  p.passes = moe::FusedMoeFp8QuantPasses(decode_path, columns);
  // Within the grid's limit: Plan refuses larger calls (QuantGridFits) before any step is planned.
  plan.blocks = static_cast<unsigned>(moe::FusedMoeFp8QuantBlocks(rows, columns, p.passes));
  return plan;
}

// One pass a warp needs the most blocks: what either path may launch.
bool QuantGridFits(int64_t rows, int64_t hidden, int64_t intermediate) {
  return moe::FusedMoeFp8QuantBlocks(rows, std::max(hidden, intermediate), 1) <= INT_MAX;
}

// One decode GEMV: `weight` [E, n, k] e4m3 with its scales `scales` [E, ceil(n / 128), ceil(k /
// 128)] times `in` (e4m3 codes, rows in_stride bytes apart, scales in_scales) into `out` (bf16,
// out_stride elements apart), by slot.
struct GemvOperands {
  const RowView* weight;
  const RowView* scales;
  int64_t n;
  int64_t k;
  const void* in;
  int64_t in_stride;
  const float* in_scales;
  void* out;
  int64_t out_stride;
};
void PlanGemv(const GemvOperands& o, const moe::FusedMoeGemvParams& common, moe::FusedMoeGemvParams* p,
              moe::FusedMoeFp8GemvScales* sc) {
  *p = common;
  p->out = o.out;
  p->out_stride = o.out_stride;
  p->in = o.in;
  p->in_stride = o.in_stride;
  p->weight = o.weight->data;
  p->weight_row_stride = o.weight->row_stride;  // e4m3: bytes
  p->weight_expert_stride = o.n * o.weight->row_stride;
  p->k = static_cast<int>(o.k);
  p->n = static_cast<int>(o.n);
  *sc = {};
  sc->in_scales = o.in_scales;
  sc->in_scale_stride = gemm::Fp8ScaleBlocks(o.k);
  sc->weight_scales = reinterpret_cast<const float*>(o.scales->data);
  const int64_t scale_row_stride = o.scales->rows > 1 ? o.scales->row_stride : gemm::Fp8ScaleBlocks(o.k);
  sc->weight_scale_row_stride = static_cast<int>(scale_row_stride);
  sc->weight_scale_expert_stride = gemm::Fp8ScaleBlocks(o.n) * scale_row_stride;
}

// The operands of a call, in the order of AcceptedDecodeCall's arrays.
enum Argument { kX, kW13, kW13Scales, kW2, kW2Scales, kIds, kWeights, kOut, kWorkspace, kArgumentCount };

void ArgumentsOf(const FusedMoeFp8Args& a, const TensorView* (&t)[kArgumentCount]) {
  t[kX] = a.x;
  t[kW13] = a.w13;
  t[kW13Scales] = a.w13_scales;
  t[kW2] = a.w2;
  t[kW2Scales] = a.w2_scales;
  t[kIds] = a.topk_ids;
  t[kWeights] = a.topk_weights;
  t[kOut] = a.out;
  t[kWorkspace] = a.workspace;
}

// The decode path's first four steps (the combine is moe_unpermute's plan) from the call's rows
// (`rows`, by Argument; the workspace's bytes at `base`): the same regions as the grouped path's,
// by token (x_q, x_scales) or by slot (the rest; rows = slots). Reads pointers, checks nothing.
struct DecodeSizes {
  int64_t top_k, experts, hidden, intermediate;
};
void PlanDecodeSteps(const RowView (&rows)[kWorkspace], const FusedMoeFp8Workspace& layout, char* base,
                     const DecodeSizes& size, FusedMoeFp8Plan* plan) {
  const RowView& x = rows[kX];
  const int64_t tokens = x.rows, slots = layout.rows, top_k = size.top_k, experts = size.experts;
  const int64_t hidden = size.hidden, intermediate = size.intermediate, gate_up = 2 * intermediate;
  void* x_q = base + layout.x_q;
  float* x_scales = reinterpret_cast<float*>(base + layout.x_scales);
  void* gate_up_rows = base + layout.gate_up;
  void* act_q = base + layout.act_q;
  float* act_scales = reinterpret_cast<float*>(base + layout.act_scales);
  int* slot_to_row = reinterpret_cast<int*>(base + layout.slot_to_row);
  plan->quantize = QuantizeLaunch(/*decode_path=*/true, x_q, x_scales, x.data, x.row_stride, tokens, hidden, nullptr,
                                  nullptr, top_k, experts);
  plan->silu = QuantizeLaunch(/*decode_path=*/true, act_q, act_scales, gate_up_rows, gate_up, slots, intermediate,
                              slot_to_row, nullptr, top_k, experts);
  FusedMoeFp8GemvPlan& g = plan->gemvs;
  g.expert_blocks = static_cast<unsigned>(moe::FusedMoeGemvExpertBlocks(experts, slots));
  moe::FusedMoeGemvParams common = {};
  common.topk_ids = reinterpret_cast<const int*>(rows[kIds].data);
  common.tokens = tokens;
  common.ids_stride = rows[kIds].row_stride;
  common.experts = static_cast<int>(experts);
  common.top_k = static_cast<int>(top_k);
  PlanGemv({&rows[kW13], &rows[kW13Scales], gate_up, hidden, x_q, hidden, x_scales, gate_up_rows, gate_up}, common,
           &g.gate_up, &g.gate_up_scales);
  g.gate_up.slot_to_row = slot_to_row;  // the first block writes it (s, or -1) for the silu and the combine
  PlanGemv({&rows[kW2], &rows[kW2Scales], hidden, intermediate, act_q, intermediate, act_scales,
            base + layout.expert_out, hidden},
           common, &g.down, &g.down_scales);
}

// A call Plan accepted on the decode path (PlanMemo, plan_memo.h): its layouts and path, the rows
// it viewed, the byte spans of its tensors (ExtentOf's, a function of the layout), its sizes and
// the combine's plan (its pointers the remembered call's). The grouped path is not remembered: a
// prefill call's GPU time dwarfs its planning.
struct AcceptedDecodeCall {
  FusedMoePath path = FusedMoePath::kAuto;
  TensorLayout layouts[kArgumentCount];
  RowView rows[kWorkspace];
  int64_t spans[kWorkspace] = {};
  FusedMoeFp8Workspace workspace;
  DecodeSizes size = {};
  int device = 0;
  MoeUnpermutePlan unpermute;
};

// Every check; a decode-path plan also fills *accepted (for the memo).
StatusOr<FusedMoeFp8Plan> Plan(const FusedMoeFp8Args& a, FusedMoePath path, AcceptedDecodeCall* accepted) {
  const TensorView* all[kArgumentCount];
  ArgumentsOf(a, all);
  for (const TensorView* t : all)
    if (t == nullptr) return Status(StatusCode::kInternal, "PlanFusedMoeFp8: every argument must be given");
  const TensorView& x_t = *a.x;
  KILN_ASSIGN_OR_RETURN(const RowView x, CheckedMoeArg(x_t, "x", 2, "[T, H]", DType::kBFloat16));
  const int64_t tokens = x_t.shape[0], hidden = x_t.shape[1];
  if (hidden < 16 || hidden % 16 != 0)
    return InvalidArgument("x", "H (dim 1) must be a positive multiple of 16 (16-byte e4m3 rows for TMA), found " +
                                    ShapeText(x_t));
  if (!MoeRowsAligned16(x))
    return InvalidArgument("x", "rows must start 16-byte aligned (the quantizer's 16-byte loads): data pointer " +
                                    PointerText(x.data) + ", row stride " + Str(x.row_stride) + " elements");

  KILN_ASSIGN_OR_RETURN(const RowView w13, CheckedMoeArg(*a.w13, "w13", 3, "[E, 2I, H]", DType::kFloat8E4M3));
  const int64_t experts = a.w13->shape[0], gate_up = a.w13->shape[1];
  if (experts < 1 || experts > moe::kMaxExperts)
    return InvalidArgument("w13",
                           "E (dim 0) must be 1 to " + Str(moe::kMaxExperts) + ", found shape " + ShapeText(*a.w13));
  if (gate_up < 32 || gate_up % 32 != 0)
    return InvalidArgument("w13", "dim 1 is the gate rows then the up rows, 2I with I a positive multiple of 16 "
                                  "(16-byte e4m3 rows of the down GEMM's input), found shape " +
                                      ShapeText(*a.w13));
  if (a.w13->shape[2] != hidden)
    return InvalidArgument("w13",
                           "expected shape [E, 2I, " + Str(hidden) + "] (H = x's dim 1), found " + ShapeText(*a.w13));
  const int64_t intermediate = gate_up / 2;
  KILN_RETURN_IF_ERROR(CheckScales(*a.w13_scales, "w13_scales", "w13[e]", experts, gate_up, hidden));

  KILN_ASSIGN_OR_RETURN(const RowView w2, CheckedMoeArg(*a.w2, "w2", 3, "[E, H, I]", DType::kFloat8E4M3));
  if (a.w2->shape[0] != experts || a.w2->shape[1] != hidden || a.w2->shape[2] != intermediate)
    return InvalidArgument("w2", "expected shape [" + Str(experts) + ", " + Str(hidden) + ", " + Str(intermediate) +
                                     "] (w13's E, x's H, w13's I), found " + ShapeText(*a.w2));
  KILN_RETURN_IF_ERROR(CheckScales(*a.w2_scales, "w2_scales", "w2[e]", experts, hidden, intermediate));

  KILN_ASSIGN_OR_RETURN(const MoeLayerRows checked,
                        CheckMoeLayerRows(*a.topk_ids, *a.topk_weights, *a.out, x_t, experts, DType::kBFloat16));
  const RowView &ids = checked.ids, &weights = checked.weights, &out = checked.out;
  const int64_t top_k = checked.top_k;
  if (!QuantGridFits(tokens * top_k, hidden, intermediate))
    return InvalidArgument("topk_ids", "T " + Str(tokens) + " x top_k " + Str(top_k) + " rows of up to " +
                                           Str(std::max(hidden, intermediate)) +
                                           " columns exceed the quantizing kernels' grid (2^31 - 1 blocks of " +
                                           Str(moe::kFp8QuantWarps) + " x " + Str(moe::kFp8QuantPassColumns) +
                                           " columns); split the call");

  const TensorView& ws_t = *a.workspace;
  const FusedMoeFp8Workspace layout = FusedMoeFp8WorkspaceOf(tokens, top_k, experts, hidden, intermediate);
  KILN_RETURN_IF_ERROR(CheckMoeWorkspace(ws_t, layout.bytes,
                                         "fused_moe_fp8_workspace_bytes(T " + Str(tokens) + ", top_k " + Str(top_k) +
                                             ", E " + Str(experts) + ", H " + Str(hidden) + ", I " + Str(intermediate) +
                                             ")"));

  const std::pair<const TensorView*, const char*> others[] = {
      {a.w13, "w13"},           {a.w13_scales, "w13_scales"},     {a.w2, "w2"},   {a.w2_scales, "w2_scales"},
      {a.topk_ids, "topk_ids"}, {a.topk_weights, "topk_weights"}, {a.out, "out"}, {a.workspace, "workspace"}};
  for (const auto& [t, name] : others) KILN_RETURN_IF_ERROR(CheckSameDevice(*t, name, x_t.device, "x"));
  // out is written last, from the workspace alone: it may be x itself (x was quantized into the
  // workspace first), nothing else. The workspace is written from the first launch on.
  KILN_RETURN_IF_ERROR(CheckNoOverlap(out, x, /*same_is_ok=*/true));
  for (const RowView* other : {&w13, &w2, &ids, &weights}) KILN_RETURN_IF_ERROR(CheckNoOverlap(out, *other, false));
  KILN_RETURN_IF_ERROR(CheckDisjoint(*a.out, "out", *a.w13_scales, "w13_scales"));
  KILN_RETURN_IF_ERROR(CheckDisjoint(*a.out, "out", *a.w2_scales, "w2_scales"));
  const TensorView used = TensorView::Contiguous(ws_t.data, DType::kUInt8, {layout.bytes}, ws_t.device);
  for (const auto& [t, name] : others)
    if (t != a.workspace) KILN_RETURN_IF_ERROR(CheckDisjoint(used, "workspace", *t, name));
  KILN_RETURN_IF_ERROR(CheckDisjoint(used, "workspace", x_t, "x"));

  FusedMoeFp8Plan plan;
  plan.tokens = tokens;
  plan.device = x_t.device.index;
  plan.workspace = layout;
  char* base = static_cast<char*>(ws_t.data);
  const Device device = x_t.device;
  const int64_t rows = layout.rows;
  const int64_t kb_h = gemm::Fp8ScaleBlocks(hidden), kb_i = gemm::Fp8ScaleBlocks(intermediate);
  const auto view = [&](int64_t offset, DType dtype, int64_t columns) {
    return TensorView::Contiguous(base + offset, dtype, {rows, columns}, device);
  };
  const TensorView counts_v = TensorView::Contiguous(base + layout.expert_counts, DType::kInt32, {experts}, device);
  const TensorView indptr_v = TensorView::Contiguous(base + layout.m_indptr, DType::kInt32, {experts + 1}, device);
  const TensorView row_to_slot_v = TensorView::Contiguous(base + layout.row_to_slot, DType::kInt32, {rows}, device);
  const TensorView slot_to_row_v = TensorView::Contiguous(base + layout.slot_to_row, DType::kInt32, {tokens, top_k},
                                                          device);
  // x's codes: by token where the gate-and-up GEMM gathers its rows (FusedMoeGatherX: T rows,
  // quantized once each), else in the grouped layout (rows, each a gathered copy of its token's).
  const bool gather = FusedMoeGatherX(intermediate);
  const int64_t x_q_rows = gather ? tokens : rows;
  const TensorView x_q_v = TensorView::Contiguous(base + layout.x_q, DType::kFloat8E4M3, {x_q_rows, hidden}, device);
  const TensorView x_scales_v = TensorView::Contiguous(base + layout.x_scales, DType::kFloat32, {x_q_rows, kb_h},
                                                       device);
  const TensorView gate_up_v = view(layout.gate_up, DType::kBFloat16, gate_up);
  const TensorView act_q_v = view(layout.act_q, DType::kFloat8E4M3, intermediate);
  const TensorView act_scales_v = view(layout.act_scales, DType::kFloat32, kb_i);
  const TensorView expert_out_v = view(layout.expert_out, DType::kBFloat16, hidden);
  const int* row_to_slot = reinterpret_cast<const int*>(row_to_slot_v.data);
  const int* m_indptr = reinterpret_cast<const int*>(indptr_v.data);

  KILN_ASSIGN_OR_RETURN(plan.permute, PlanMoePermute({&counts_v, &indptr_v, &row_to_slot_v, &slot_to_row_v, nullptr,
                                                      a.topk_ids, nullptr, /*align=*/1},
                                                     kFusedMoeFp8PermuteStep));
  plan.quantize = QuantizeLaunch(/*decode_path=*/false, x_q_v.data, static_cast<float*>(x_scales_v.data), x.data,
                                 x.row_stride, x_q_rows, hidden, gather ? nullptr : row_to_slot,
                                 gather ? nullptr : m_indptr, top_k, experts);
  // Gathered: row r of the groups is x_q's row row_to_slot[r] / top_k (slot t * top_k + j).
  const GroupedGemmGather by_slot{&row_to_slot_v, top_k};
  const GroupedGemmGather* x_rows = gather ? &by_slot : nullptr;
  // The gate-and-up GEMM quantizes silu(gate) * up itself where each tile's 128 columns are one
  // scale group (I a multiple of 128) and no forced tactic narrows its tile; else it writes bf16
  // rows for the silu-and-quantize.
  plan.silu_in_gate_up = intermediate % gemm::kFp8ScaleBlock == 0 && FusedMoeFp8SiluEpilogue() &&
                         GroupedFp8CodesTileAllowed();
  if (plan.silu_in_gate_up) {
    KILN_ASSIGN_OR_RETURN(plan.gate_up,
                          PlanGroupedFp8GemmSiluAndMul(act_q_v, act_scales_v, x_q_v, *a.w13, x_scales_v, *a.w13_scales,
                                                       indptr_v, kFusedMoeFp8GateUpStep, x_rows));
  } else {
    KILN_ASSIGN_OR_RETURN(plan.gate_up, PlanGroupedFp8Gemm(gate_up_v, x_q_v, *a.w13, x_scales_v, *a.w13_scales,
                                                           indptr_v, kFusedMoeFp8GateUpStep, x_rows));
  }
  plan.silu = QuantizeLaunch(/*decode_path=*/false, act_q_v.data, static_cast<float*>(act_scales_v.data),
                             gate_up_v.data, gate_up, rows, intermediate, nullptr, m_indptr, top_k, experts);
  KILN_ASSIGN_OR_RETURN(plan.down, PlanGroupedFp8Gemm(expert_out_v, act_q_v, *a.w2, act_scales_v, *a.w2_scales,
                                                      indptr_v, kFusedMoeFp8DownStep));
  KILN_ASSIGN_OR_RETURN(plan.unpermute, PlanMoeUnpermute({a.out, &expert_out_v, &slot_to_row_v, a.topk_weights},
                                                         kFusedMoeFp8CombineStep));

  const bool gemv_possible = rows <= moe::kMaxGemvSlots;
  plan.gemv = gemv_possible && path != FusedMoePath::kGrouped &&
              (path == FusedMoePath::kGemv || FusedMoeFp8GemvSuits(tokens, top_k, experts, hidden, intermediate));
  if (!plan.gemv) return plan;
  AcceptedDecodeCall& c = *accepted;
  KILN_ASSIGN_OR_RETURN(c.rows[kW13Scales], ViewAsRows(*a.w13_scales, "w13_scales"));
  KILN_ASSIGN_OR_RETURN(c.rows[kW2Scales], ViewAsRows(*a.w2_scales, "w2_scales"));
  c.rows[kX] = x;
  c.rows[kW13] = w13;
  c.rows[kW2] = w2;
  c.rows[kIds] = ids;
  c.rows[kWeights] = weights;
  c.rows[kOut] = out;
  c.size = {top_k, experts, hidden, intermediate};
  PlanDecodeSteps(c.rows, layout, base, c.size, &plan);
  c.path = path;
  for (int k = 0; k < kArgumentCount; ++k) c.layouts[k] = TensorLayout::Of(*all[k]);
  for (int k = 0; k < kWorkspace; ++k) {
    const ByteExtent e = ExtentOf(*all[k]);
    c.spans[k] = static_cast<int64_t>(e.end - e.begin);
  }
  c.workspace = layout;
  c.device = device.index;
  c.unpermute = plan.unpermute;
  return plan;
}

// A call with a remembered decode-path call's layouts and path, and pointers of its own: the
// checks of Plan that read pointers, then the decode path's plan for these pointers. Every other
// check of Plan reads only the layouts, which matched. False when a pointer check would refuse
// (or might: the combine's access width changed): the whole validation then answers.
//   Plan's pointer checks, and where they are here: ViewAsRows of the eight tensors (Rebind); x's
// 16-byte rows; the workspace's pointer (NULL, 256-byte alignment); out against x (in place
// allowed), w13, w2, topk_ids and topk_weights, and the two scales' bytes; the workspace's bytes
// against all eight; the grouped GEMMs' TMA alignment of w13 and w2 (16 bytes; their row strides
// are the layouts'). The steps' own overlap checks are of workspace regions (disjoint by
// construction) or of one of those pairs. So the grouped path's steps, not launched on this path,
// are not planned again: the plan leaves permute, gate_up and down empty.
bool PlanFromMemo(AcceptedDecodeCall& c, const FusedMoeFp8Args& a, FusedMoeFp8Plan* plan) {
  const TensorView* t[kArgumentCount];
  ArgumentsOf(a, t);
  for (int k = 0; k < kWorkspace; ++k)
    if (!c.rows[k].Rebind(*t[k])) return false;
  const RowView& x = c.rows[kX];
  const RowView& out = c.rows[kOut];
  if (!MoeRowsAligned16(x)) return false;
  if (c.rows[kW13].begin() % 16 != 0 || c.rows[kW2].begin() % 16 != 0) return false;
  const uintptr_t ws = reinterpret_cast<uintptr_t>(a.workspace->data);
  if (ws == 0 || ws % 256 != 0) return false;
  if (RowsOverlap(out, x, /*same_is_ok=*/true)) return false;
  for (int k : {kW13, kW2, kIds, kWeights})
    if (RowsOverlap(out, c.rows[k], false)) return false;
  const auto meets = [&](int k, uintptr_t begin, uintptr_t end) {
    return SpanMeets(t[k]->data, c.spans[k], begin, end);
  };
  const uintptr_t out_begin = reinterpret_cast<uintptr_t>(t[kOut]->data);
  const uintptr_t out_end = out_begin + static_cast<uintptr_t>(c.spans[kOut]);
  if (meets(kW13Scales, out_begin, out_end) || meets(kW2Scales, out_begin, out_end)) return false;
  for (int k = 0; k < kWorkspace; ++k)
    if (meets(k, ws, ws + static_cast<uintptr_t>(c.workspace.bytes))) return false;

  char* base = reinterpret_cast<char*>(ws);
  // The combine over this call's pointers (its access width reads out's and the expert rows').
  MoeUnpermutePlan unpermute = c.unpermute;
  if (!RebindMoeUnpermute(&unpermute, out.data, base + c.workspace.expert_out,
                          reinterpret_cast<const int*>(base + c.workspace.slot_to_row),
                          reinterpret_cast<const float*>(c.rows[kWeights].data)))
    return false;

  plan->tokens = x.rows;
  plan->device = c.device;
  plan->workspace = c.workspace;
  plan->gemv = true;
  PlanDecodeSteps(c.rows, c.workspace, base, c.size, plan);
  plan->unpermute = unpermute;
  return true;
}

}  // namespace

FusedMoeFp8Workspace FusedMoeFp8WorkspaceOf(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                                            int64_t intermediate) {
  FusedMoeFp8Workspace w;
  w.rows = tokens * top_k;
  w.expert_counts = 0;
  w.m_indptr = w.expert_counts + Region(4 * experts);
  w.row_to_slot = w.m_indptr + Region(4 * (experts + 1));
  w.slot_to_row = w.row_to_slot + Region(4 * w.rows);
  w.x_q = w.slot_to_row + Region(4 * w.rows);
  w.x_scales = w.x_q + Region(w.rows * hidden);
  w.gate_up = w.x_scales + Region(4 * w.rows * gemm::Fp8ScaleBlocks(hidden));
  w.expert_out = w.x_q;
  const int64_t shared_end = w.gate_up + Region(2 * w.rows * 2 * intermediate);
  const int64_t out_end = w.expert_out + Region(2 * w.rows * hidden);
  w.act_q = shared_end > out_end ? shared_end : out_end;
  w.act_scales = w.act_q + Region(w.rows * intermediate);
  w.bytes = w.act_scales + Region(4 * w.rows * gemm::Fp8ScaleBlocks(intermediate));
  return w;
}

// The crossover, measured (H100, bench/moe/gpu_round.sh fp8-paths and the DeepSeek-V3 and Mixtral
// rows of bench/results/2026-12-05-fused-moe-fp8-decode-h100.md):
//  - Qwen3-30B-A3B-FP8 (E 128, top_k 8, 4.7 MB an expert): the decode path ahead through T 32
//    (237 against 261 us), even at T 64 = 4 E slots (266 against 269), behind at T 96 (302 against
//    280): the slot limit.
//  - DeepSeek-V3 (E 256, 44 MB an expert): ahead at T 1 (165 against 187 us), behind at T 32 (2452
//    against 2386) and T 128 (4107 against 3743), where the grouped GEMMs stream the weights at
//    97-98 % of a copy's bandwidth and the GEMVs at 89-95 %: the byte limit. T 2-31 unmeasured.
//  - Mixtral-8x7B (E 8, 176 MB an expert): ahead at every T it takes (1-16; 557 against 573 us at
//    16, 1.4 GB read).
constexpr int64_t kFp8GemvMaxSlotsPerExpert = 4;
constexpr int64_t kFp8GemvMaxWeightBytes = int64_t{2} << 30;

bool FusedMoeFp8GemvSuits(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t intermediate) {
  const int64_t slots = tokens * top_k;
  const int64_t experts_read = slots < experts ? slots : experts;
  return slots <= kFp8GemvMaxSlotsPerExpert * experts && slots <= moe::kMaxGemvSlots &&
         experts_read * 3 * hidden * intermediate <= kFp8GemvMaxWeightBytes;
}

StatusOr<FusedMoeFp8Plan> PlanFusedMoeFp8(const FusedMoeFp8Args& args, const char* api, FusedMoePath path) {
  const TensorView* t[kArgumentCount];
  ArgumentsOf(args, t);
  thread_local PlanMemo<AcceptedDecodeCall> memo;
  return PlanDecodeCallWithMemo<FusedMoeFp8Plan>(
      memo, t, path, api,
      [&](AcceptedDecodeCall& seen, FusedMoeFp8Plan* plan) { return PlanFromMemo(seen, args, plan); },
      [&](AcceptedDecodeCall* accepted) { return Plan(args, path, accepted); });
}

StatusOr<FusedMoeFp8Plan> PlanFusedMoeFp8Fully(const FusedMoeFp8Args& args, const char* api, FusedMoePath path) {
  AcceptedDecodeCall accepted;
  auto plan = Plan(args, path, &accepted);
  if (!plan.ok()) return plan.status().WithContext(api);
  return plan;
}

}  // namespace kiln::client
