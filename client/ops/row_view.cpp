#include "client/ops/row_view.h"

#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"

namespace kiln::client {

Status SameDeviceError(const TensorView& tensor, const char* name, const Device& device, const char* owner) {
  return InvalidArgument(name, "on " + DeviceName(tensor.device) + ", but " + owner + " is on " + DeviceName(device) +
                                   "; all tensors must be on one device");
}

Status CheckCudaTensor(const TensorView& t, const char* name) {
  if (t.device.type != DeviceType::kCUDA)
    return InvalidArgument(name, "expected a CUDA device tensor, found one on " + DeviceName(t.device));
  if (t.device.index < 0)
    return InvalidArgument(name, "device ordinal " + std::to_string(t.device.index) + " is negative");
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0)
      return InvalidArgument(name, "dim " + std::to_string(d) + " has negative size " + std::to_string(t.shape[d]) +
                                       " (shape " + ShapeText(t) + ")");
    if (t.strides[d] < 0)
      return InvalidArgument(name, "dim " + std::to_string(d) + " has negative stride " + std::to_string(t.strides[d]) +
                                       " (strides " + StridesText(t) + "); only non-negative strides are supported");
  }
  return OkStatus();
}

uintptr_t RowView::end() const {
  if (empty()) return begin();
  return begin() + static_cast<uintptr_t>(((rows - 1) * row_stride + hidden) * element_size);
}

StatusOr<RowView> ViewAsRows(const TensorView& t, const char* name) {
  RowView v;
  KILN_RETURN_IF_ERROR(ViewAsRowsInto(t, name, &v));
  return v;
}

Status ViewAsRowsInto(const TensorView& t, const char* name, RowView* view) {
  if (t.ndim < 1 || t.ndim > kMaxTensorDims)
    return InvalidArgument(name, "expected a tensor of rank 1 to " + std::to_string(kMaxTensorDims) +
                                     " ([..., hidden]), found rank " + std::to_string(t.ndim));
  // CheckCudaTensor's conditions in the one pass that also counts the rows; it is called only to
  // say what is wrong (the op-call overhead: a second loop and a Status on every call).
  const int last = t.ndim - 1;
  bool bad = t.device.type != DeviceType::kCUDA || t.device.index < 0;
  int64_t rows = 1;
  for (int d = 0; d < t.ndim; ++d) {
    bad |= t.shape[d] < 0 || t.strides[d] < 0;
    if (d < last) rows *= t.shape[d];
  }
  if (bad) return CheckCudaTensor(t, name);
  RowView& v = *view;
  v.name = name;
  v.tensor = &t;
  v.data = static_cast<char*>(t.data);
  v.element_size = DTypeSize(t.dtype);
  v.hidden = t.shape[last];
  v.rows = rows;

  if (t.shape[last] > 1 && t.strides[last] != 1)
    return InvalidArgument(name, "the last dim must be contiguous (stride 1), found stride " +
                                     std::to_string(t.strides[last]) + " in " + t.Describe());

  // Leading dims flatten into rows when each (of size > 1) steps over exactly the next one.
  v.row_stride = v.hidden;
  if (v.rows > 1) {
    int inner = -1;  // the innermost leading dim of size > 1
    for (int d = last - 1; d >= 0; --d) {
      if (t.shape[d] == 1) continue;
      if (inner < 0) {
        inner = d;
        v.row_stride = t.strides[d];
      } else {
        int64_t expected = 1;
        // stride of dim d must equal stride(inner-most so far) * product of sizes in between
        for (int e = d + 1; e <= inner; ++e) expected *= t.shape[e];
        expected *= t.strides[inner];
        if (t.strides[d] != expected)
          return InvalidArgument(name, "leading dims " + ShapeText(t) + " with strides " + StridesText(t) +
                                           " cannot be flattened into rows: dim " + std::to_string(d) + " has stride " +
                                           std::to_string(t.strides[d]) + ", flattening needs " +
                                           std::to_string(expected) + "; make the tensor contiguous");
      }
    }
  }

  if (!v.empty() && v.data == nullptr)
    return InvalidArgument(name, "data is NULL, but the tensor " + ShapeText(t) + " is not empty");
  // Element sizes are powers of two: a mask, not a 64-bit division (the op-call overhead).
  if (v.element_size > 1 && (v.begin() & (v.element_size - 1)) != 0)
    return InvalidArgument(name, "data pointer " + PointerText(v.begin()) + " is not aligned to " +
                                     std::to_string(v.element_size) + " bytes (the size of one " + DTypeName(t.dtype) +
                                     " element)");
  return OkStatus();
}

bool RowsOverlap(const RowView& a, const RowView& b, bool same_is_ok) {
  if (a.empty() || b.empty()) return false;
  if (a.end() <= b.begin() || b.end() <= a.begin()) return false;
  if (same_is_ok && a.data == b.data && a.row_stride == b.row_stride && a.hidden == b.hidden) return false;
  // Interleaved rows of one buffer (e.g. the two halves of [rows, 2*hidden]) share no element
  // when every row of one lies in the gap between two rows of the other.
  if (a.row_stride == b.row_stride && a.element_size == b.element_size) {
    const int64_t stride = a.row_stride * static_cast<int64_t>(a.element_size);
    const int64_t a_bytes = a.hidden * static_cast<int64_t>(a.element_size);
    const int64_t b_bytes = b.hidden * static_cast<int64_t>(b.element_size);
    int64_t offset = (static_cast<int64_t>(b.begin()) - static_cast<int64_t>(a.begin())) % stride;
    if (offset < 0) offset += stride;
    if (offset >= a_bytes && stride - offset >= b_bytes) return false;
  }
  return true;
}

Status CheckNoOverlap(const RowView& a, const RowView& b, bool same_is_ok) {
  if (!RowsOverlap(a, b, same_is_ok)) return OkStatus();
  return InvalidArgument(
      std::string(a.name) + " and " + b.name + " overlap in memory (" + a.name + " " + PointerText(a.begin()) + "..." +
      PointerText(a.end()) + ", " + b.name + " " + PointerText(b.begin()) + "..." + PointerText(b.end()) + ")" +
      (same_is_ok
           ? "; " + std::string(a.name) + " must be " + b.name + " itself (same pointer and strides) or separate memory"
           : "; they must be separate memory"));
}

ByteExtent ExtentOf(const TensorView& t) {
  ByteExtent e;
  e.begin = e.end = reinterpret_cast<uintptr_t>(t.data);
  if (t.ndim < 0 || t.numel() == 0) return e;
  int64_t last = 0;
  for (int d = 0; d < t.ndim; ++d) last += (t.shape[d] - 1) * t.strides[d];
  e.end = e.begin + static_cast<uintptr_t>((last + 1) * static_cast<int64_t>(DTypeSize(t.dtype)));
  return e;
}

Status CheckDisjoint(const TensorView& a, const char* a_name, const TensorView& b, const char* b_name) {
  const ByteExtent x = ExtentOf(a), y = ExtentOf(b);
  if (x.begin == x.end || y.begin == y.end || x.end <= y.begin || y.end <= x.begin) return OkStatus();
  return InvalidArgument(std::string(a_name) + " and " + b_name + " overlap in memory (" + a_name + " " +
                         PointerText(x.begin) + "..." + PointerText(x.end) + ", " + b_name + " " +
                         PointerText(y.begin) + "..." + PointerText(y.end) + "); they must be separate memory");
}

}  // namespace kiln::client
