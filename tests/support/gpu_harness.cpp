#include "tests/support/gpu_harness.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "kiln/client.h"

namespace kiln::testing {

void CheckCuda(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  FAIL(what << " failed: " << Driver().ErrorText(result));
}

const client::CudaDriver& Driver() {
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) FAIL(driver.status().message());
  return **driver;
}

GpuSession::GpuSession(int min_cc) : gpu_(RequireGpu(min_cc)) {
  const auto& d = Driver();
  CUdevice device = 0;
  KILN_CU(d.cuDeviceGet(&device, gpu_.ordinal));
  KILN_CU(d.cuDevicePrimaryCtxRetain(&context_, device));
  KILN_CU(d.cuCtxSetCurrent(context_));
  DaemonOptions options;
  options.root = dir_.path();
  daemon_ = std::make_unique<DaemonProcess>(options);
  ClientOptions client;
  client.socket = daemon_->socket();
  REQUIRE(Configure(client).ok());
  std::printf("GPU: %s (%s, %d SMs), driver for CUDA %d.%d\n", gpu_.name.c_str(), gpu_.arch.c_str(),
              gpu_.multiprocessors, gpu_.driver_version / 1000, (gpu_.driver_version % 1000) / 10);
}

GpuSession::~GpuSession() {
  Configure(ClientOptions{});
  // The primary context stays retained: the client holds loaded kernels in it until exit.
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  KILN_CU(Driver().cuMemAlloc(&ptr_, bytes > 0 ? bytes : 1));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != 0) Driver().cuMemFree(ptr_);
}

void DeviceBuffer::Upload(const std::vector<uint8_t>& host) {
  REQUIRE(host.size() <= bytes_);
  KILN_CU(Driver().cuMemcpyHtoD(ptr_, host.data(), host.size()));
}

std::vector<uint8_t> DeviceBuffer::Download() const {
  std::vector<uint8_t> host(bytes_);
  KILN_CU(Driver().cuMemcpyDtoH(host.data(), ptr_, bytes_));
  return host;
}

void DeviceBuffer::Poison() { KILN_CU(Driver().cuMemsetD8(ptr_, 0xFF, bytes_)); }

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

uint16_t FloatToBf16(float value) {
  uint32_t u = Bits(value);
  if (std::isnan(value)) return 0x7FC0;
  u += 0x7FFF + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t bits) { return FromBits(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToHalf(float value) {
  const uint32_t u = Bits(value);
  const uint32_t sign = (u >> 16) & 0x8000;
  if (std::isnan(value)) return 0x7E00;
  float a = std::fabs(value);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to infinity
  if (a < 6.103515625e-05f) {
    // Subnormal half: a multiple of 2^-24, rounded to nearest even by the FPU.
    const float scaled = a * 16777216.0f;  // 2^24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t mag = Bits(a);
  uint32_t exponent = ((mag >> 23) & 0xFF) - 127 + 15;
  uint32_t mantissa = mag & 0x7FFFFF;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;  // may carry into the exponent
  return static_cast<uint16_t>(sign | half);
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) / 16777216.0f;  // 2^-24 units
    return sign ? -value : value;
  }
  if (exponent == 31) return FromBits(sign | 0x7F800000u | (mantissa << 13));
  return FromBits(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

float HostTensor::Get(size_t i) const {
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      return f;
    }
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      return HalfToFloat(h);
    }
    case DType::kBFloat16: {
      uint16_t b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      return Bf16ToFloat(b);
    }
    default: FAIL("HostTensor: unsupported dtype"); return 0;
  }
}

void HostTensor::Set(size_t i, float value) {
  switch (dtype) {
    case DType::kFloat32: std::memcpy(bytes.data() + 4 * i, &value, 4); break;
    case DType::kFloat16: {
      uint16_t h = FloatToHalf(value);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
      break;
    }
    case DType::kBFloat16: {
      uint16_t b = FloatToBf16(value);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
      break;
    }
    default: FAIL("HostTensor: unsupported dtype");
  }
}

HostTensor MakeHostTensor(DType dtype, size_t count) {
  HostTensor t;
  t.dtype = dtype;
  t.bytes.assign(count * DTypeSize(dtype), 0);
  return t;
}

HostTensor RandomTensor(DType dtype, size_t count, std::mt19937& rng, float lo, float hi) {
  HostTensor t = MakeHostTensor(dtype, count);
  std::uniform_real_distribution<float> uniform(lo, hi);
  for (size_t i = 0; i < count; ++i) {
    float v = uniform(rng);
    if (v == 0.0f) v = 0.5f;  // never zero: a zero row would hide a missing write
    t.Set(i, v);
  }
  return t;
}

Tolerance ToleranceFor(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return {1e-5, 1e-5};
    case DType::kFloat16: return {2e-3, 2e-3};   // 2^-11 rounding of the output, plus fp32 math
    case DType::kBFloat16: return {1.6e-2, 1.6e-2};  // 2^-8 rounding of the output
    default: return {0, 0};
  }
}

bool Close(double got, double want, Tolerance t) {
  return std::isfinite(got) && std::fabs(got - want) <= t.abs + t.rel * std::fabs(want);
}

}  // namespace kiln::testing
