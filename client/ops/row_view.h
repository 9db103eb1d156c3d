// RowView: a tensor argument of a row-wise op, checked and seen as [rows, hidden] — leading
// dims flattened (only where their strides allow it), the last dim contiguous.
#pragma once

#include <cstdint>

#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

struct RowView {
  const char* name = "";  // the argument: "input", "out", ...
  const TensorView* tensor = nullptr;
  char* data = nullptr;
  size_t element_size = 0;
  int64_t rows = 0;
  int64_t hidden = 0;
  int64_t row_stride = 0;  // elements between row starts; `hidden` when rows <= 1

  bool empty() const { return rows == 0 || hidden == 0; }
  // The bytes the view spans, [begin, end): rows of `hidden` elements, `row_stride` apart.
  uintptr_t begin() const { return reinterpret_cast<uintptr_t>(data); }
  uintptr_t end() const;

  // The same view of `t`, a tensor of the layout this view was made from (PlanMemo): false
  // when `t`'s pointer fails ViewAsRows's pointer checks (NULL for a non-empty view, not
  // aligned to the element size), which ViewAsRows then names.
  bool Rebind(const TensorView& t) {
    tensor = &t;
    data = static_cast<char*>(t.data);
    if (data == nullptr) return empty();
    return element_size <= 1 || (begin() & (element_size - 1)) == 0;
  }
};

// INVALID_ARGUMENT "<name>: ..." for a tensor that is not on a CUDA device (or has a negative
// device ordinal), or has a negative size or stride. The checks every view below starts with;
// the rank is the caller's to check first.
Status CheckCudaTensor(const TensorView& tensor, const char* name);

// INVALID_ARGUMENT "<name>: on cuda:1, but <owner> is on cuda:0; all tensors must be on one
// device" unless `tensor` is on `device` (the device of the op's defining tensor, `owner`).
// Inline: every op call checks its tensors this way (the op-call overhead); the message is
// built out of line, only when they differ (SameDeviceError: the error itself).
Status SameDeviceError(const TensorView& tensor, const char* name, const Device& device, const char* owner);
inline Status CheckSameDevice(const TensorView& tensor, const char* name, const Device& device, const char* owner) {
  if (tensor.device == device) return OkStatus();
  return SameDeviceError(tensor, name, device, owner);
}

// INVALID_ARGUMENT "<name>: ..." for: a rank outside 1..kMaxTensorDims, a negative size or
// stride, a last dim that is not contiguous, leading dims that cannot be flattened, a NULL
// pointer for a non-empty tensor, a pointer not aligned to the element size, or a device that
// is not CUDA.
StatusOr<RowView> ViewAsRows(const TensorView& tensor, const char* name);
// The same into *view (left unspecified on an error): the form the ops' plans use on every call,
// without a StatusOr to build and move (the op-call overhead).
Status ViewAsRowsInto(const TensorView& tensor, const char* name, RowView* view);

// OK when the two views share no element, or are the very same view (same pointer and row
// stride) and `same_is_ok`. Otherwise INVALID_ARGUMENT naming both.
Status CheckNoOverlap(const RowView& a, const RowView& b, bool same_is_ok);
// The same question without a Status: true when CheckNoOverlap would refuse them.
bool RowsOverlap(const RowView& a, const RowView& b, bool same_is_ok);

// Where a tensor's elements lie: [begin, end) bytes; empty when it has no element.
struct ByteExtent {
  uintptr_t begin = 0;
  uintptr_t end = 0;
};
ByteExtent ExtentOf(const TensorView& t);

// OK when the extents share no byte; INVALID_ARGUMENT naming both otherwise.
Status CheckDisjoint(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name);

}  // namespace kiln::client
