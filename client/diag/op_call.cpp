#include "client/diag/op_call.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "client/core/api/message_text.h"

namespace kiln::client::diag {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kInput: return "input";
    case Role::kOutput: return "output";
    case Role::kInOut: return "inout";
  }
  return "unknown";
}

std::string DoubleText(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[40];
  for (int precision = 6; precision <= 17; ++precision) {  // the shortest that reads back exactly
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

int PointerAlignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  int alignment = 1;
  while (alignment < 256 && address % (static_cast<uintptr_t>(alignment) * 2) == 0) alignment *= 2;
  return alignment;
}

std::string DescribeTensor(const TensorView& t) {
  return t.Describe() + " @" + PointerText(t.data) + " align=" + std::to_string(PointerAlignment(t.data));
}

OpCall& OpCall::Param(const char* name, double value) { return Param(name, DoubleText(value)); }
OpCall& OpCall::Param(const char* name, int64_t value) { return Param(name, std::to_string(value)); }
OpCall& OpCall::Param(const char* name, uint64_t value) { return Param(name, std::to_string(value)); }

Device OpCall::CallDevice() const {
  for (const auto& t : tensors)
    if (t.view.device.type == DeviceType::kCUDA) return t.view.device;
  return tensors.empty() ? Device::CUDA(0) : tensors.front().view.device;
}

int64_t OpCall::TensorBytes() const {
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (t.view.ndim < 0 || t.view.ndim > kMaxTensorDims) continue;
    const int64_t n = t.view.numel();
    const int64_t b = n > 0 ? n * static_cast<int64_t>(DTypeSize(t.view.dtype)) : 0;
    if (t.IsInput()) bytes += b;
    if (t.IsOutput()) bytes += b;  // an inout tensor is written twice (inputs and outputs)
  }
  return bytes;
}

}  // namespace kiln::client::diag
