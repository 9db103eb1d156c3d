#include "client/ops/moe/moe_plan.h"

#include <climits>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/row_view.h"

namespace kiln::client {
namespace {

std::string RankText(const TensorView& t) {
  return std::to_string(t.ndim) + (t.ndim >= 1 && t.ndim <= kMaxTensorDims ? " " + ShapeText(t) : "");
}

// An output [tokens, top_k] of `dtype`: rank, dtype, rows, then the row view.
StatusOr<RowView> OutputRows(const TensorView& t, const char* name, DType dtype, int64_t tokens) {
  if (t.ndim != 2) return InvalidArgument(name, "expected a 2-D tensor [T, top_k], found rank " + RankText(t));
  if (t.dtype != dtype)
    return InvalidArgument(name, std::string("expected dtype ") + DTypeName(dtype) + ", found " + DTypeName(t.dtype));
  if (t.shape[0] != tokens)
    return InvalidArgument(name, "expected " + std::to_string(tokens) + " rows (logits' tokens), found shape " +
                                     ShapeText(t));
  return ViewAsRows(t, name);
}

StatusOr<MoeRoutePlan> Plan(const MoeRouteArgs& a) {
  if (a.topk_ids == nullptr || a.topk_weights == nullptr || a.logits == nullptr)
    return Status(StatusCode::kInternal, "PlanMoeRoute: topk_ids, topk_weights and logits must be given");
  const TensorView& logits_t = *a.logits;

  if (logits_t.ndim != 2)
    return InvalidArgument("logits", "expected a 2-D tensor [T, E], found rank " + RankText(logits_t));
  if (logits_t.dtype != DType::kFloat32 && logits_t.dtype != DType::kFloat16 && logits_t.dtype != DType::kBFloat16)
    return InvalidArgument("logits",
                           std::string("expected dtype fp32, fp16 or bf16, found ") + DTypeName(logits_t.dtype));
  KILN_ASSIGN_OR_RETURN(const RowView logits, ViewAsRows(logits_t, "logits"));
  const int64_t tokens = logits_t.shape[0];
  const int64_t experts = logits_t.shape[1];
  if (experts < 1 || experts > moe::kMaxExperts)
    return InvalidArgument("logits", "the number of experts (dim 1) must be 1 to " + std::to_string(moe::kMaxExperts) +
                                         ", found " + std::to_string(experts) + " in shape " + ShapeText(logits_t));

  KILN_ASSIGN_OR_RETURN(const RowView ids, OutputRows(*a.topk_ids, "topk_ids", DType::kInt32, tokens));
  KILN_ASSIGN_OR_RETURN(const RowView weights, OutputRows(*a.topk_weights, "topk_weights", DType::kFloat32, tokens));
  const int64_t top_k = a.topk_ids->shape[1];
  if (a.topk_weights->shape[1] != top_k)
    return InvalidArgument("topk_weights", "expected shape " + ShapeText(*a.topk_ids) + " (topk_ids'), found " +
                                               ShapeText(*a.topk_weights));
  if (top_k < 1 || top_k > moe::kMaxTopK)
    return InvalidArgument("topk_ids", "top_k (dim 1) must be 1 to " + std::to_string(moe::kMaxTopK) + ", found " +
                                           std::to_string(top_k));
  if (top_k > experts)
    return InvalidArgument("topk_ids", "top_k (dim 1) = " + std::to_string(top_k) + " exceeds the " +
                                           std::to_string(experts) + " experts of logits " + ShapeText(logits_t));
  KILN_RETURN_IF_ERROR(CheckSameDevice(*a.topk_ids, "topk_ids", logits_t.device, "logits"));
  KILN_RETURN_IF_ERROR(CheckSameDevice(*a.topk_weights, "topk_weights", logits_t.device, "logits"));

  const float* bias = nullptr;
  RowView bias_view;
  if (a.correction_bias != nullptr) {
    const TensorView& b = *a.correction_bias;
    if (b.ndim != 1)
      return InvalidArgument("correction_bias", "expected a 1-D tensor [E] = [" + std::to_string(experts) +
                                                    "], found rank " + RankText(b));
    if (b.dtype != DType::kFloat32)
      return InvalidArgument("correction_bias", std::string("expected dtype fp32, found ") + DTypeName(b.dtype));
    if (b.shape[0] != experts)
      return InvalidArgument("correction_bias", "expected shape [" + std::to_string(experts) +
                                                    "] (logits' experts), found " + ShapeText(b));
    KILN_ASSIGN_OR_RETURN(bias_view, ViewAsRows(b, "correction_bias"));
    KILN_RETURN_IF_ERROR(CheckSameDevice(b, "correction_bias", logits_t.device, "logits"));
    bias = reinterpret_cast<const float*>(bias_view.data);
  }
  for (const RowView* out : {&ids, &weights}) {
    KILN_RETURN_IF_ERROR(CheckNoOverlap(*out, logits, false));
    if (bias != nullptr) KILN_RETURN_IF_ERROR(CheckNoOverlap(*out, bias_view, false));
  }
  KILN_RETURN_IF_ERROR(CheckNoOverlap(ids, weights, false));

  if (a.scoring != static_cast<int>(ops::MoeScoring::kSoftmax) &&
      a.scoring != static_cast<int>(ops::MoeScoring::kSigmoid))
    return InvalidArgument("scoring", "expected 0 (softmax) or 1 (sigmoid), found " + std::to_string(a.scoring));
  if (a.n_group < 1 || a.n_group > moe::kMaxGroups)
    return InvalidArgument("n_group", "expected 1 (no group limit) to " + std::to_string(moe::kMaxGroups) + ", found " +
                                          std::to_string(a.n_group));
  if (experts % a.n_group != 0)
    return InvalidArgument("n_group", "must divide the " + std::to_string(experts) + " experts, found " +
                                          std::to_string(a.n_group));
  if (a.topk_group < 1 || a.topk_group > a.n_group)
    return InvalidArgument("topk_group", "expected 1 to n_group = " + std::to_string(a.n_group) + ", found " +
                                             std::to_string(a.topk_group));
  const int64_t kept = a.topk_group * (experts / a.n_group);
  if (top_k > kept)
    return InvalidArgument("topk_ids", "top_k (dim 1) = " + std::to_string(top_k) + " exceeds the " +
                                           std::to_string(kept) + " experts of the kept groups (topk_group " +
                                           std::to_string(a.topk_group) + " of n_group " + std::to_string(a.n_group) +
                                           " groups of " + std::to_string(experts / a.n_group) + ")");
  if (!(std::isfinite(a.routed_scaling_factor) && a.routed_scaling_factor > 0))
    return InvalidArgument("routed_scaling_factor",
                           "expected a finite value > 0, found " + NumberText(a.routed_scaling_factor));

  MoeRoutePlan plan;
  plan.dtype = logits_t.dtype;
  plan.sigmoid = a.scoring == static_cast<int>(ops::MoeScoring::kSigmoid);
  plan.max_experts = MaxExpertsFor(experts);
  plan.device = logits_t.device.index;
  moe::MoeRouteParams& p = plan.params;
  p.topk_ids = reinterpret_cast<int*>(ids.data);
  p.topk_weights = reinterpret_cast<float*>(weights.data);
  p.logits = logits.data;
  p.correction_bias = bias;
  p.tokens = tokens;
  p.logits_stride = logits.row_stride;
  p.ids_stride = ids.row_stride;
  p.weights_stride = weights.row_stride;
  p.experts = static_cast<int>(experts);
  p.top_k = static_cast<int>(top_k);
  p.n_group = static_cast<int>(a.n_group);
  p.topk_group = static_cast<int>(a.topk_group);
  p.renormalize = a.renormalize ? 1 : 0;
  p.routed_scaling_factor = a.routed_scaling_factor;
  return plan;
}

// A 1-D int32 tensor `name` [what]: rank and dtype, then its view.
StatusOr<RowView> IntVector(const TensorView& t, const char* name, const std::string& what) {
  if (t.ndim != 1) return InvalidArgument(name, "expected a 1-D tensor [" + what + "], found rank " + RankText(t));
  if (t.dtype != DType::kInt32)
    return InvalidArgument(name, std::string("expected dtype int32, found ") + DTypeName(t.dtype));
  return ViewAsRows(t, name);
}

// How the row bound was computed, for the messages.
std::string RowsText(int64_t tokens, int64_t top_k, int64_t experts, int64_t align) {
  std::string text = "T * top_k";
  if (align > 1) text += " + E * (align - 1)";
  text += " = " + std::to_string(tokens) + " * " + std::to_string(top_k);
  if (align > 1) text += " + " + std::to_string(experts) + " * " + std::to_string(align - 1);
  return text;
}

StatusOr<MoePermutePlan> PlanPermute(const MoePermuteArgs& a) {
  if (a.expert_counts == nullptr || a.m_indptr == nullptr || a.row_to_slot == nullptr || a.slot_to_row == nullptr ||
      a.topk_ids == nullptr)
    return Status(StatusCode::kInternal,
                  "PlanMoePermute: expert_counts, m_indptr, row_to_slot, slot_to_row and topk_ids must be given");
  const TensorView& ids_t = *a.topk_ids;
  if (ids_t.ndim != 2)
    return InvalidArgument("topk_ids", "expected a 2-D tensor [T, top_k], found rank " + RankText(ids_t));
  if (ids_t.dtype != DType::kInt32)
    return InvalidArgument("topk_ids", std::string("expected dtype int32, found ") + DTypeName(ids_t.dtype));
  KILN_ASSIGN_OR_RETURN(const RowView ids, ViewAsRows(ids_t, "topk_ids"));
  const int64_t tokens = ids_t.shape[0];
  const int64_t top_k = ids_t.shape[1];
  if (top_k < 1 || top_k > moe::kMaxTopK)
    return InvalidArgument("topk_ids", "top_k (dim 1) must be 1 to " + std::to_string(moe::kMaxTopK) + ", found " +
                                           std::to_string(top_k));

  KILN_ASSIGN_OR_RETURN(const RowView counts, IntVector(*a.expert_counts, "expert_counts", "E"));
  const int64_t experts = a.expert_counts->shape[0];
  if (experts < 1 || experts > moe::kMaxExperts)
    return InvalidArgument("expert_counts", "the number of experts (dim 0) must be 1 to " +
                                                std::to_string(moe::kMaxExperts) + ", found " +
                                                std::to_string(experts));
  KILN_ASSIGN_OR_RETURN(const RowView indptr, IntVector(*a.m_indptr, "m_indptr", "E + 1"));
  if (a.m_indptr->shape[0] != experts + 1)
    return InvalidArgument("m_indptr", "expected shape [" + std::to_string(experts + 1) +
                                           "] (expert_counts' experts + 1), found " + ShapeText(*a.m_indptr));

  const TensorView& s2r_t = *a.slot_to_row;
  if (s2r_t.ndim != 2)
    return InvalidArgument("slot_to_row", "expected a 2-D tensor [T, top_k], found rank " + RankText(s2r_t));
  if (s2r_t.dtype != DType::kInt32)
    return InvalidArgument("slot_to_row", std::string("expected dtype int32, found ") + DTypeName(s2r_t.dtype));
  if (s2r_t.shape[0] != tokens || s2r_t.shape[1] != top_k)
    return InvalidArgument("slot_to_row",
                           "expected shape " + ShapeText(ids_t) + " (topk_ids'), found " + ShapeText(s2r_t));
  KILN_ASSIGN_OR_RETURN(const RowView s2r, ViewAsRows(s2r_t, "slot_to_row"));

  if (a.align < 1 || a.align > moe::kMaxAlign || (a.align & (a.align - 1)) != 0)
    return InvalidArgument("align", "expected a power of two from 1 (no padding) to " + std::to_string(moe::kMaxAlign) +
                                        ", found " + std::to_string(a.align));
  const int64_t rows = moe::MoePermuteRows(tokens, top_k, experts, a.align);
  if (rows > INT_MAX)
    return InvalidArgument("topk_ids", RowsText(tokens, top_k, experts, a.align) + " = " + std::to_string(rows) +
                                           " rows exceed 2^31 - 1 (int32 row indices); split the call");
  KILN_ASSIGN_OR_RETURN(const RowView r2s, IntVector(*a.row_to_slot, "row_to_slot", "rows"));
  if (a.row_to_slot->shape[0] < rows)
    return InvalidArgument("row_to_slot", "expected at least " + std::to_string(rows) + " rows (" +
                                              RowsText(tokens, top_k, experts, a.align) + "), found shape " +
                                              ShapeText(*a.row_to_slot));
  for (const auto& [t, name] : {std::pair{a.expert_counts, "expert_counts"}, std::pair{a.m_indptr, "m_indptr"},
                                std::pair{a.row_to_slot, "row_to_slot"}, std::pair{a.slot_to_row, "slot_to_row"}})
    KILN_RETURN_IF_ERROR(CheckSameDevice(*t, name, ids_t.device, "topk_ids"));

  if ((a.x == nullptr) != (a.permuted_x == nullptr))
    return InvalidArgument(a.x == nullptr ? "x" : "permuted_x",
                           std::string("x and permuted_x go together (the gather), found ") +
                               (a.x == nullptr ? "permuted_x without x" : "x without permuted_x"));
  RowView x, out;
  if (a.x != nullptr) {
    const TensorView& x_t = *a.x;
    const TensorView& out_t = *a.permuted_x;
    if (x_t.ndim != 2) return InvalidArgument("x", "expected a 2-D tensor [T, H], found rank " + RankText(x_t));
    if (x_t.dtype != DType::kBFloat16 && x_t.dtype != DType::kFloat16)
      return InvalidArgument("x", std::string("expected dtype bf16 or fp16, found ") + DTypeName(x_t.dtype));
    if (x_t.shape[0] != tokens)
      return InvalidArgument("x", "expected " + std::to_string(tokens) + " rows (topk_ids' tokens), found shape " +
                                      ShapeText(x_t));
    if (x_t.shape[1] < 1)
      return InvalidArgument("x", "expected a hidden size (dim 1) of at least 1, found shape " + ShapeText(x_t));
    KILN_ASSIGN_OR_RETURN(x, ViewAsRows(x_t, "x"));
    if (out_t.ndim != 2)
      return InvalidArgument("permuted_x", "expected a 2-D tensor [rows, H], found rank " + RankText(out_t));
    if (out_t.dtype != x_t.dtype)
      return InvalidArgument("permuted_x", std::string("expected dtype ") + DTypeName(x_t.dtype) + " (x's), found " +
                                               DTypeName(out_t.dtype));
    if (out_t.shape[1] != x_t.shape[1])
      return InvalidArgument("permuted_x", "expected " + std::to_string(x_t.shape[1]) +
                                               " columns (x's hidden size), found shape " + ShapeText(out_t));
    if (out_t.shape[0] < rows)
      return InvalidArgument("permuted_x", "expected at least " + std::to_string(rows) + " rows (" +
                                               RowsText(tokens, top_k, experts, a.align) + "), found shape " +
                                               ShapeText(out_t));
    KILN_ASSIGN_OR_RETURN(out, ViewAsRows(out_t, "permuted_x"));
    KILN_RETURN_IF_ERROR(CheckSameDevice(x_t, "x", ids_t.device, "topk_ids"));
    KILN_RETURN_IF_ERROR(CheckSameDevice(out_t, "permuted_x", ids_t.device, "topk_ids"));
  }

  // Outputs overlap neither the inputs nor each other.
  std::vector<const RowView*> outputs = {&counts, &indptr, &r2s, &s2r};
  std::vector<const RowView*> inputs = {&ids};
  if (a.x != nullptr) {
    outputs.push_back(&out);
    inputs.push_back(&x);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (const RowView* in : inputs) KILN_RETURN_IF_ERROR(CheckNoOverlap(*outputs[i], *in, false));
    for (size_t j = i + 1; j < outputs.size(); ++j)
      KILN_RETURN_IF_ERROR(CheckNoOverlap(*outputs[i], *outputs[j], false));
  }

  MoePermutePlan plan;
  plan.max_experts = MaxExpertsFor(experts);
  plan.device = ids_t.device.index;
  moe::MoePermuteParams& p = plan.params;
  p.expert_counts = reinterpret_cast<int*>(counts.data);
  p.m_indptr = reinterpret_cast<int*>(indptr.data);
  p.row_to_slot = reinterpret_cast<int*>(r2s.data);
  p.slot_to_row = reinterpret_cast<int*>(s2r.data);
  p.topk_ids = reinterpret_cast<const int*>(ids.data);
  p.tokens = tokens;
  p.ids_stride = ids.row_stride;
  p.slot_to_row_stride = s2r.row_stride;
  p.rows = a.row_to_slot->shape[0];
  p.experts = static_cast<int>(experts);
  p.top_k = static_cast<int>(top_k);
  p.align = static_cast<int>(a.align);
  if (a.x != nullptr) {
    plan.gather = true;
    moe::MoePermuteGatherParams& g = plan.gather_params;
    g.permuted_x = out.data;
    g.x = x.data;
    g.row_to_slot = p.row_to_slot;
    g.m_indptr = p.m_indptr;
    g.rows = rows;
    g.x_stride_bytes = x.row_stride * static_cast<int64_t>(x.element_size);
    g.out_stride_bytes = out.row_stride * static_cast<int64_t>(out.element_size);
    g.row_bytes = x.hidden * static_cast<int64_t>(x.element_size);
    g.experts = p.experts;
    g.top_k = p.top_k;
    g.unit_bytes = WidestUnit({static_cast<uint64_t>(g.row_bytes), static_cast<uint64_t>(g.x_stride_bytes),
                               static_cast<uint64_t>(g.out_stride_bytes), x.begin(), out.begin()});
  }
  return plan;
}

StatusOr<MoeUnpermutePlan> PlanUnpermute(const MoeUnpermuteArgs& a) {
  if (a.out == nullptr || a.expert_out == nullptr || a.slot_to_row == nullptr || a.topk_weights == nullptr)
    return Status(StatusCode::kInternal,
                  "PlanMoeUnpermute: out, expert_out, slot_to_row and topk_weights must be given");
  const TensorView& src_t = *a.expert_out;
  if (src_t.ndim != 2)
    return InvalidArgument("expert_out", "expected a 2-D tensor [R, H], found rank " + RankText(src_t));
  if (src_t.dtype != DType::kBFloat16 && src_t.dtype != DType::kFloat16)
    return InvalidArgument("expert_out", std::string("expected dtype bf16 or fp16, found ") + DTypeName(src_t.dtype));
  if (src_t.shape[1] < 1)
    return InvalidArgument("expert_out",
                           "expected a hidden size (dim 1) of at least 1, found shape " + ShapeText(src_t));
  KILN_ASSIGN_OR_RETURN(const RowView src, ViewAsRows(src_t, "expert_out"));
  const int64_t hidden = src_t.shape[1];

  const TensorView& s2r_t = *a.slot_to_row;
  if (s2r_t.ndim != 2)
    return InvalidArgument("slot_to_row", "expected a 2-D tensor [T, top_k], found rank " + RankText(s2r_t));
  if (s2r_t.dtype != DType::kInt32)
    return InvalidArgument("slot_to_row", std::string("expected dtype int32, found ") + DTypeName(s2r_t.dtype));
  const int64_t tokens = s2r_t.shape[0];
  const int64_t top_k = s2r_t.shape[1];
  if (top_k < 1 || top_k > moe::kMaxTopK)
    return InvalidArgument("slot_to_row", "top_k (dim 1) must be 1 to " + std::to_string(moe::kMaxTopK) + ", found " +
                                              std::to_string(top_k));
  KILN_ASSIGN_OR_RETURN(const RowView s2r, ViewAsRows(s2r_t, "slot_to_row"));

  const TensorView& w_t = *a.topk_weights;
  if (w_t.ndim != 2)
    return InvalidArgument("topk_weights", "expected a 2-D tensor [T, top_k], found rank " + RankText(w_t));
  if (w_t.dtype != DType::kFloat32)
    return InvalidArgument("topk_weights", std::string("expected dtype fp32, found ") + DTypeName(w_t.dtype));
  if (w_t.shape[0] != tokens || w_t.shape[1] != top_k)
    return InvalidArgument("topk_weights",
                           "expected shape " + ShapeText(s2r_t) + " (slot_to_row's), found " + ShapeText(w_t));
  KILN_ASSIGN_OR_RETURN(const RowView weights, ViewAsRows(w_t, "topk_weights"));

  const TensorView& out_t = *a.out;
  if (out_t.ndim != 2) return InvalidArgument("out", "expected a 2-D tensor [T, H], found rank " + RankText(out_t));
  if (out_t.dtype != src_t.dtype)
    return InvalidArgument("out", std::string("expected dtype ") + DTypeName(src_t.dtype) + " (expert_out's), found " +
                                      DTypeName(out_t.dtype));
  if (out_t.shape[0] != tokens || out_t.shape[1] != hidden)
    return InvalidArgument("out", "expected shape [" + std::to_string(tokens) + ", " + std::to_string(hidden) +
                                      "] (slot_to_row's tokens, expert_out's hidden size), found " + ShapeText(out_t));
  KILN_ASSIGN_OR_RETURN(const RowView out, ViewAsRows(out_t, "out"));
  for (const auto& [t, name] :
       {std::pair{a.slot_to_row, "slot_to_row"}, std::pair{a.topk_weights, "topk_weights"}, std::pair{a.out, "out"}})
    KILN_RETURN_IF_ERROR(CheckSameDevice(*t, name, src_t.device, "expert_out"));
  // The inputs may share memory (all are read only); out is written while they are read.
  for (const RowView* in : {&src, &s2r, &weights}) KILN_RETURN_IF_ERROR(CheckNoOverlap(out, *in, false));

  // Tokens go on grid.x, the blocks of a row on grid.y.
  if (tokens > INT_MAX)
    return InvalidArgument("slot_to_row", std::to_string(tokens) +
                                              " tokens exceed 2^31 - 1 (one block column per token); split the call");
  const int64_t out_stride_bytes = out.row_stride * static_cast<int64_t>(out.element_size);
  const int64_t src_stride_bytes = src.row_stride * static_cast<int64_t>(src.element_size);
  const int64_t row_bytes = hidden * static_cast<int64_t>(src.element_size);
  const int unit = WidestUnit({static_cast<uint64_t>(row_bytes), static_cast<uint64_t>(out_stride_bytes),
                               static_cast<uint64_t>(src_stride_bytes), out.begin(), src.begin()});
  const int64_t units = row_bytes / unit;
  const int64_t blocks_per_row = moe::MoeUnpermuteBlocksPerRow(units);
  if (blocks_per_row > moe::kMaxUnpermuteBlocksPerRow)
    return InvalidArgument("expert_out", "a row of " + std::to_string(hidden) + " elements is " +
                                             std::to_string(units) + " units of " + std::to_string(unit) +
                                             " bytes, more than " +
                                             std::to_string(moe::kMaxUnpermuteBlocksPerRow * moe::kUnpermuteBlock) +
                                             " (65535 blocks of " + std::to_string(moe::kUnpermuteBlock) + ")");

  MoeUnpermutePlan plan;
  plan.dtype = src_t.dtype;
  plan.device = src_t.device.index;
  plan.threads = static_cast<unsigned>(moe::MoeUnpermuteThreads(units));
  plan.blocks_per_row = static_cast<unsigned>(blocks_per_row);
  moe::MoeUnpermuteParams& p = plan.params;
  p.out = out.data;
  p.expert_out = src.data;
  p.slot_to_row = reinterpret_cast<const int*>(s2r.data);
  p.topk_weights = reinterpret_cast<const float*>(weights.data);
  p.tokens = tokens;
  p.rows = src_t.shape[0];
  p.out_stride_bytes = out_stride_bytes;
  p.expert_stride_bytes = src_stride_bytes;
  p.slot_to_row_stride = s2r.row_stride;
  p.weights_stride = weights.row_stride;
  p.units = static_cast<int>(units);
  p.unit_bytes = unit;
  p.top_k = static_cast<int>(top_k);
  return plan;
}

}  // namespace

int WidestUnit(std::initializer_list<uint64_t> values) {
  for (int unit : {16, 8, 4}) {
    bool divides = true;
    for (uint64_t v : values) divides = divides && v % static_cast<uint64_t>(unit) == 0;
    if (divides) return unit;
  }
  return 2;
}

StatusOr<MoePermutePlan> PlanMoePermute(const MoePermuteArgs& args, const char* api) {
  auto plan = PlanPermute(args);
  if (!plan.ok()) return plan.status().WithContext(api);
  return plan;
}

bool RebindMoeUnpermute(MoeUnpermutePlan* plan, void* out, const void* expert_out, const int* slot_to_row,
                        const float* topk_weights) {
  moe::MoeUnpermuteParams& u = plan->params;
  const int64_t row_bytes = static_cast<int64_t>(u.units) * u.unit_bytes;
  if (WidestUnit({static_cast<uint64_t>(row_bytes), static_cast<uint64_t>(u.out_stride_bytes),
                  static_cast<uint64_t>(u.expert_stride_bytes), reinterpret_cast<uintptr_t>(out),
                  reinterpret_cast<uintptr_t>(expert_out)}) != u.unit_bytes)
    return false;
  u.out = out;
  u.expert_out = expert_out;
  u.slot_to_row = slot_to_row;
  u.topk_weights = topk_weights;
  return true;
}

StatusOr<MoeUnpermutePlan> PlanMoeUnpermute(const MoeUnpermuteArgs& args, const char* api) {
  auto plan = PlanUnpermute(args);
  if (!plan.ok()) return plan.status().WithContext(api);
  return plan;
}

int MaxExpertsFor(int64_t experts) {
  int max_experts = 32;
  while (max_experts < experts) max_experts *= 2;
  return max_experts;
}

StatusOr<MoeRoutePlan> PlanMoeRoute(const MoeRouteArgs& args, const char* api) {
  auto plan = Plan(args);
  if (!plan.ok()) return plan.status().WithContext(api);
  return plan;
}

}  // namespace kiln::client
