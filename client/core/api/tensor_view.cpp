#include "kiln/tensor_view.h"

namespace kiln {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 1;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kFloat8E4M3: return 1;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "fp32";
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat8E4M3: return "fp8_e4m3";
  }
  return "unknown-dtype";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt8, DType::kUInt8, DType::kInt32,
                  DType::kInt64, DType::kFloat8E4M3})
    if (name == DTypeName(d)) return d;
  return std::nullopt;
}

std::string DeviceName(const Device& device) {
  const std::string index = std::to_string(device.index);
  switch (device.type) {
    case DeviceType::kCPU: return "cpu";
    case DeviceType::kCUDA: return "cuda:" + index;
    case DeviceType::kCUDAHost: return "cuda_host:" + index;
    case DeviceType::kCUDAManaged: return "cuda_managed:" + index;
  }
  return "device_type_" + std::to_string(static_cast<int>(device.type)) + ":" + index;
}

TensorView TensorView::Contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  if (shape.size() > static_cast<size_t>(kMaxTensorDims)) {
    t.ndim = -1;
    return t;
  }
  t.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d] > 0 ? t.shape[d] : 1;
  }
  return t;
}

TensorView TensorView::Strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides, Device device) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  if (shape.size() > static_cast<size_t>(kMaxTensorDims) || strides.size() != shape.size()) {
    t.ndim = -1;
    return t;
  }
  t.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  i = 0;
  for (int64_t s : strides) t.strides[i++] = s;
  return t;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim && d < kMaxTensorDims; ++d) n *= shape[d];
  return n;
}

std::string TensorView::Describe() const {
  if (ndim < 0 || ndim > kMaxTensorDims)
    return std::string(DTypeName(dtype)) + " tensor of invalid rank " + std::to_string(ndim);
  std::string s = std::string(DTypeName(dtype)) + "[";
  for (int d = 0; d < ndim; ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  s += "] strides [";
  for (int d = 0; d < ndim; ++d) s += (d ? ", " : "") + std::to_string(strides[d]);
  s += "] " + DeviceName(device);
  return s;
}

}  // namespace kiln
