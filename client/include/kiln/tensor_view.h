// kiln::TensorView: a non-owning description of a tensor in GPU memory (pointer, dtype, shape,
// strides in elements, device), the way the ops API receives its arguments. It never
// allocates, so building one on every call is free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/export.h"

namespace kiln {

enum class DType : uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kFloat8E4M3,  // fp8 e4m3 (OCP "e4m3fn": no infinities, one NaN); DLPack 1.0 code 10
};

KILN_API size_t DTypeSize(DType dtype);       // bytes per element
KILN_API const char* DTypeName(DType dtype);  // "fp32", "fp16", "bf16", "int8", ... (op params)
// The dtype DTypeName spells `name`; nullopt for any other text.
KILN_API std::optional<DType> DTypeFromName(std::string_view name);

// The numbers are DLPack's DLDeviceType values.
enum class DeviceType : int32_t {
  kCPU = 1,
  kCUDA = 2,
  kCUDAHost = 3,      // pinned host memory
  kCUDAManaged = 13,  // unified memory
};

struct Device {
  DeviceType type = DeviceType::kCUDA;
  int index = 0;  // CUDA device ordinal (as CUDA_VISIBLE_DEVICES numbers them)

  static constexpr Device CUDA(int index = 0) { return {DeviceType::kCUDA, index}; }
  static constexpr Device CPU() { return {DeviceType::kCPU, 0}; }
  friend constexpr bool operator==(const Device&, const Device&) = default;
};

KILN_API std::string DeviceName(const Device& device);  // "cuda:0", "cpu", "cuda_host:0"

inline constexpr int kMaxTensorDims = 8;

struct KILN_API TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  int ndim = 0;
  int64_t shape[kMaxTensorDims] = {};
  int64_t strides[kMaxTensorDims] = {};  // in elements, not bytes
  Device device;

  // A row-major (C-contiguous) view. More than kMaxTensorDims dims give ndim = -1, which
  // every op rejects with a message.
  static TensorView Contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::CUDA(0));
  // Any layout; `strides` has one entry per dim of `shape` (a size mismatch gives ndim = -1).
  static TensorView Strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides, Device device = Device::CUDA(0));

  int64_t numel() const;  // product of the shape (0 for an empty tensor, 1 for 0-d)
  // "bf16[7, 4096] strides [4096, 1] cuda:0": for messages and API logs.
  std::string Describe() const;
};

}  // namespace kiln
