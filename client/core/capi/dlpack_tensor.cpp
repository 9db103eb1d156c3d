#include "client/core/capi/dlpack_tensor.h"

#include <string>

#include "client/core/api/invalid_argument.h"

namespace kiln::client {
namespace {

// DLPack 1.0's kDLFloat8_e4m3fn (the installed dlpack.h, 0.6, predates the fp8 codes; PyTorch
// exports float8_e4m3fn tensors with it).
constexpr uint8_t kDLFloat8E4M3fnCode = 10;

const char* CodeName(uint8_t code) {
  switch (code) {
    case kDLInt: return "kDLInt";
    case kDLUInt: return "kDLUInt";
    case kDLFloat: return "kDLFloat";
    case kDLBfloat: return "kDLBfloat";
    case kDLFloat8E4M3fnCode: return "kDLFloat8_e4m3fn";
    default: return "an unknown code";
  }
}

bool ToDType(const DLDataType& t, DType* out) {
  if (t.code == kDLFloat && t.bits == 32) *out = DType::kFloat32;
  else if (t.code == kDLFloat && t.bits == 16) *out = DType::kFloat16;
  else if (t.code == kDLBfloat && t.bits == 16) *out = DType::kBFloat16;
  else if (t.code == kDLInt && t.bits == 8) *out = DType::kInt8;
  else if (t.code == kDLUInt && t.bits == 8) *out = DType::kUInt8;
  else if (t.code == kDLInt && t.bits == 32) *out = DType::kInt32;
  else if (t.code == kDLInt && t.bits == 64) *out = DType::kInt64;
  else if (t.code == kDLFloat8E4M3fnCode && t.bits == 8) *out = DType::kFloat8E4M3;
  else return false;
  return true;
}

}  // namespace

StatusOr<TensorView> FromDLTensor(const DLTensor* t, const char* name) {
  if (t == nullptr) return InvalidArgument(name, "the DLTensor pointer is NULL");
  if (t->ndim < 1 || t->ndim > kMaxTensorDims)
    return InvalidArgument(name, "expected ndim 1 to " + std::to_string(kMaxTensorDims) + ", found " +
                                     std::to_string(t->ndim));
  if (t->shape == nullptr) return InvalidArgument(name, "shape is NULL with ndim " + std::to_string(t->ndim));
  if (t->dtype.lanes != 1)
    return InvalidArgument(name, "dtype lanes must be 1, found " + std::to_string(t->dtype.lanes) +
                                     " (vector dtypes are not supported)");
  TensorView v;
  if (!ToDType(t->dtype, &v.dtype))
    return InvalidArgument(name,
                           "dtype code " + std::to_string(t->dtype.code) + " (" + CodeName(t->dtype.code) + ") with " +
                               std::to_string(t->dtype.bits) +
                               " bits is not supported; expected kDLFloat 32 or 16, kDLBfloat 16, kDLInt 8, 32 or "
                               "64, or kDLUInt 8");
  switch (t->device.device_type) {
    case kDLCUDA: v.device.type = DeviceType::kCUDA; break;
    case kDLCPU: v.device.type = DeviceType::kCPU; break;
    case kDLCUDAHost: v.device.type = DeviceType::kCUDAHost; break;
    case kDLCUDAManaged: v.device.type = DeviceType::kCUDAManaged; break;
    default:
      return InvalidArgument(name, "device type " + std::to_string(t->device.device_type) +
                                       " is not supported; expected kDLCUDA (2)");
  }
  v.device.index = t->device.device_id;
  v.ndim = t->ndim;
  for (int d = 0; d < t->ndim; ++d) v.shape[d] = t->shape[d];
  if (t->strides != nullptr) {
    for (int d = 0; d < t->ndim; ++d) v.strides[d] = t->strides[d];
  } else {
    int64_t stride = 1;
    for (int d = t->ndim - 1; d >= 0; --d) {
      v.strides[d] = stride;
      stride *= t->shape[d] > 0 ? t->shape[d] : 1;
    }
  }
  v.data = t->data == nullptr ? nullptr : static_cast<char*>(t->data) + t->byte_offset;
  return v;
}

}  // namespace kiln::client
