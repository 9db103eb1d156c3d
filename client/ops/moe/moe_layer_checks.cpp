#include "client/ops/moe/moe_layer_checks.h"

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "kiln/moe/moe_contract.h"

namespace kiln::client {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

}  // namespace

std::string MoeRankText(const TensorView& t) {
  return Str(t.ndim) + (t.ndim >= 1 && t.ndim <= kMaxTensorDims ? " " + ShapeText(t) : "");
}

StatusOr<RowView> CheckedMoeArg(const TensorView& t, const char* name, int rank, const std::string& shape_text,
                                DType dtype) {
  if (t.ndim != rank)
    return InvalidArgument(name,
                           "expected a " + Str(rank) + "-D tensor " + shape_text + ", found rank " + MoeRankText(t));
  if (t.dtype != dtype)
    return InvalidArgument(name, std::string("expected dtype ") + DTypeName(dtype) + ", found " + DTypeName(t.dtype));
  return ViewAsRows(t, name);
}

StatusOr<MoeLayerRows> CheckMoeLayerRows(const TensorView& topk_ids, const TensorView& topk_weights,
                                         const TensorView& out, const TensorView& x, int64_t experts, DType out_dtype) {
  MoeLayerRows r;
  const int64_t tokens = x.shape[0];
  KILN_ASSIGN_OR_RETURN(r.ids, CheckedMoeArg(topk_ids, "topk_ids", 2, "[T, top_k]", DType::kInt32));
  r.top_k = topk_ids.shape[1];
  if (topk_ids.shape[0] != tokens)
    return InvalidArgument("topk_ids", "expected " + Str(tokens) + " rows (x's T), found shape " + ShapeText(topk_ids));
  if (r.top_k < 1 || r.top_k > moe::kMaxTopK || r.top_k > experts)
    return InvalidArgument("topk_ids", "top_k (dim 1) must be 1 to min(E, " + Str(moe::kMaxTopK) +
                                           ") = " + Str(experts < moe::kMaxTopK ? experts : moe::kMaxTopK) +
                                           ", found " + ShapeText(topk_ids));
  KILN_ASSIGN_OR_RETURN(r.weights, CheckedMoeArg(topk_weights, "topk_weights", 2, "[T, top_k]", DType::kFloat32));
  if (topk_weights.shape[0] != tokens || topk_weights.shape[1] != r.top_k)
    return InvalidArgument("topk_weights",
                           "expected shape " + ShapeText(topk_ids) + " (topk_ids'), found " + ShapeText(topk_weights));
  KILN_ASSIGN_OR_RETURN(r.out, CheckedMoeArg(out, "out", 2, "[T, H]", out_dtype));
  if (out.shape[0] != tokens || out.shape[1] != x.shape[1])
    return InvalidArgument("out", "expected shape " + ShapeText(x) + " (x's), found " + ShapeText(out));
  return r;
}

Status CheckMoeWorkspace(const TensorView& ws, int64_t bytes, const std::string& size_call) {
  if (ws.ndim != 1) return InvalidArgument("workspace", "expected a 1-D tensor [bytes], found rank " + MoeRankText(ws));
  if (ws.dtype != DType::kUInt8)
    return InvalidArgument("workspace", std::string("expected dtype uint8, found ") + DTypeName(ws.dtype));
  KILN_RETURN_IF_ERROR(CheckCudaTensor(ws, "workspace"));
  if (ws.shape[0] < bytes)
    return InvalidArgument("workspace",
                           "expected at least " + size_call + " = " + Str(bytes) + " bytes, found " + ShapeText(ws));
  if (ws.shape[0] > 1 && ws.strides[0] != 1)
    return InvalidArgument("workspace", "must be contiguous (stride 1), found stride " + Str(ws.strides[0]));
  if (ws.data == nullptr) return InvalidArgument("workspace", "data pointer is NULL");
  if (reinterpret_cast<uintptr_t>(ws.data) % 256 != 0)
    return InvalidArgument("workspace", "data pointer " + PointerText(ws.data) + " is not 256-byte aligned");
  return OkStatus();
}

}  // namespace kiln::client
