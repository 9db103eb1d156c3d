// The argument checks fused_moe and fused_moe_fp8 share (fused_moe_plan.cpp,
// fused_moe_fp8_plan.cpp): a tensor's rank and dtype, the routing tensors, out and the workspace.
// Each returns INVALID_ARGUMENT "<argument>: <expected>, found <found>" (the plan adds the API's
// name). Pure: no driver call.
#pragma once

#include <cstdint>
#include <string>

#include "client/ops/row_view.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// "<rank> [<shape>]" of a tensor, the shape only where the rank is one a tensor may have.
std::string MoeRankText(const TensorView& t);

// The rank, the dtype and the row view (device, pointer, alignment, last dim) of one argument.
StatusOr<RowView> CheckedMoeArg(const TensorView& t, const char* name, int rank, const std::string& shape_text,
                                DType dtype);

// topk_ids [T, top_k] int32 with 1 <= top_k <= min(E, 16), topk_weights of its shape in fp32, out
// [T, H] of `out_dtype` (x's shape).
struct MoeLayerRows {
  RowView ids;
  RowView weights;
  RowView out;
  int64_t top_k = 0;
};
StatusOr<MoeLayerRows> CheckMoeLayerRows(const TensorView& topk_ids, const TensorView& topk_weights,
                                         const TensorView& out, const TensorView& x, int64_t experts, DType out_dtype);

// Whether every row of the view can be read with 16-byte loads: its pointer and its row stride in
// bytes are multiples of 16 (the layers' GEMVs and quantizers). Inline: fused_moe's plan memo
// reruns it on every decode call.
inline bool MoeRowsAligned16(const RowView& v) {
  return reinterpret_cast<uintptr_t>(v.data) % 16 == 0 &&
         (v.rows <= 1 || (v.row_stride * static_cast<int64_t>(v.element_size)) % 16 == 0);
}

// A 1-D contiguous uint8 workspace of at least `bytes` on a CUDA device, 256-byte aligned;
// `size_call` names the public function that gives the size ("fused_moe_workspace_bytes(T 7, ...)").
Status CheckMoeWorkspace(const TensorView& workspace, int64_t bytes, const std::string& size_call);

}  // namespace kiln::client
