#include "tests/support/gpu_harness.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "client/core/api/float16.h"
#include "kiln/client.h"

namespace kiln::testing {

void CheckCuda(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  FAIL(what << " failed: " << Driver().ErrorText(result));
}

CapturedCall::CapturedCall(const std::function<Status(CUstream stream)>& call) {
  const client::CudaDriver& d = Driver();
  KILN_CU(d.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  KILN_CU(d.cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  status_ = call(stream_);
  KILN_CU(d.cuStreamEndCapture(stream_, &graph_));
  if (status_.ok()) KILN_CU(d.cuGraphInstantiateWithFlags(&exec_, graph_, 0));
}

CapturedCall::~CapturedCall() {
  const client::CudaDriver& d = Driver();
  if (exec_ != nullptr) KILN_CU(d.cuGraphExecDestroy(exec_));
  if (graph_ != nullptr) KILN_CU(d.cuGraphDestroy(graph_));
  if (stream_ != nullptr) KILN_CU(d.cuStreamDestroy(stream_));
}

void CapturedCall::Replay() const {
  const client::CudaDriver& d = Driver();
  KILN_CU(d.cuGraphLaunch(exec_, stream_));
  KILN_CU(d.cuStreamSynchronize(stream_));
}

const client::CudaDriver& Driver() {
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) FAIL(driver.status().message());
  return **driver;
}

GpuSession::GpuSession(int min_cc, int max_cc) : gpu_(RequireGpu(min_cc, max_cc)) {
  const auto& d = Driver();
  CUdevice device = 0;
  KILN_CU(d.cuDeviceGet(&device, gpu_.ordinal));
  KILN_CU(d.cuDevicePrimaryCtxRetain(&context_, device));
  KILN_CU(d.cuCtxSetCurrent(context_));
  DaemonOptions options;
  options.root = dir_.path();
  // A session's daemon compiles into a fresh cache unless KILN_TEST_CACHE_DIR names one to share:
  // then a kernel that several test cases (or later runs on the same machine) use compiles once.
  // The cache key names the generated sources, the options and the toolchain, so a changed
  // kernel or generator gets its own entry, never an old cubin.
  if (const char* shared = std::getenv("KILN_TEST_CACHE_DIR"); shared != nullptr && *shared != '\0')
    options.cache_dir = shared;
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

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) { KILN_CU(Driver().cuMemAlloc(&ptr_, bytes > 0 ? bytes : 1)); }

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

// cuMemsetD8 runs on the legacy stream, which a CU_STREAM_NON_BLOCKING stream does not wait for:
// the poison is made complete here, so a launch on any stream after it sees it.
void DeviceBuffer::Poison() {
  KILN_CU(Driver().cuMemsetD8(ptr_, 0xFF, bytes_));
  KILN_CU(Driver().cuCtxSynchronize());
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
      return client::HalfToFloat(h);
    }
    case DType::kBFloat16: {
      uint16_t b;
      std::memcpy(&b, bytes.data() + 2 * i, 2);
      return client::BFloat16ToFloat(b);
    }
    case DType::kFloat8E4M3: return client::Fp8E4M3ToFloat(bytes[i]);
    default: FAIL("HostTensor: unsupported dtype"); return 0;
  }
}

void HostTensor::Set(size_t i, float value) {
  switch (dtype) {
    case DType::kFloat32: std::memcpy(bytes.data() + 4 * i, &value, 4); break;
    case DType::kFloat16: {
      uint16_t h = client::FloatToHalf(value);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
      break;
    }
    case DType::kBFloat16: {
      uint16_t b = client::FloatToBFloat16(value);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
      break;
    }
    case DType::kFloat8E4M3: bytes[i] = client::FloatToFp8E4M3(value); break;
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
    case DType::kFloat16: return {2e-3, 2e-3};       // 2^-11 rounding of the output, plus fp32 math
    case DType::kBFloat16: return {1.6e-2, 1.6e-2};  // 2^-8 rounding of the output
    default: return {0, 0};
  }
}

bool Close(double got, double want, Tolerance t) {
  return std::isfinite(got) && std::fabs(got - want) <= t.abs + t.rel * std::fabs(want);
}

DLTensor ToDLTensor(const TensorView& t) {
  DLTensor dl{};
  dl.data = t.data;
  dl.device = {kDLCUDA, t.device.index};
  dl.ndim = t.ndim;
  dl.dtype = t.dtype == DType::kBFloat16     ? DLDataType{kDLBfloat, 16, 1}
             : t.dtype == DType::kFloat16    ? DLDataType{kDLFloat, 16, 1}
             : t.dtype == DType::kInt32      ? DLDataType{kDLInt, 32, 1}
             : t.dtype == DType::kFloat8E4M3 ? DLDataType{10, 8, 1}  // DLPack 1.0 kDLFloat8_e4m3fn
                                             : DLDataType{kDLFloat, 32, 1};
  dl.shape = const_cast<int64_t*>(t.shape);
  dl.strides = const_cast<int64_t*>(t.strides);
  return dl;
}

std::vector<uint8_t> Bytes(const void* data, size_t bytes) {
  std::vector<uint8_t> b(bytes);
  if (bytes > 0) std::memcpy(b.data(), data, bytes);
  return b;
}

std::unique_ptr<DeviceBuffer> UploadInts(const std::vector<int32_t>& values) {
  auto buffer = std::make_unique<DeviceBuffer>(std::max<size_t>(values.size() * 4, 4));
  buffer->Upload(Bytes(values.data(), values.size() * 4));
  return buffer;
}

TensorView IntView(const DeviceBuffer& buffer, size_t count) {
  return TensorView::Contiguous(buffer.data(), DType::kInt32, {static_cast<int64_t>(count)});
}

}  // namespace kiln::testing
