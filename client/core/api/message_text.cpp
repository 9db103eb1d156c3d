#include "client/core/api/message_text.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace kiln::client {

std::string PointerText(const void* p) { return PointerText(reinterpret_cast<uintptr_t>(p)); }

std::string PointerText(uintptr_t address) {
  if (address == 0) return "(nil)";
  char buffer[24];
  std::snprintf(buffer, sizeof(buffer), "0x%" PRIxPTR, address);
  return buffer;
}

std::string ListText(std::span<const int64_t> values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

std::string ListText(std::initializer_list<int64_t> values) {
  return ListText(std::span<const int64_t>(values.begin(), values.size()));
}

std::string ShapeText(const TensorView& tensor) {
  return ListText(
      std::span<const int64_t>(tensor.shape, static_cast<size_t>(std::clamp(tensor.ndim, 0, kMaxTensorDims))));
}

std::string StridesText(const TensorView& tensor) {
  return ListText(
      std::span<const int64_t>(tensor.strides, static_cast<size_t>(std::clamp(tensor.ndim, 0, kMaxTensorDims))));
}

std::string DimsText(const Dim3& dims) {
  return "(" + std::to_string(dims.x) + ", " + std::to_string(dims.y) + ", " + std::to_string(dims.z) + ")";
}

std::string NumberText(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

}  // namespace kiln::client
