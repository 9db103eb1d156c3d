// What the [gpu] tests of the client share: a GPU session (skipped visibly without a suitable
// GPU; a real kilnd in temp folders; the client pointed at it; the device's primary context
// current), device buffers through the client's driver loader (no cudart), host tensors,
// random data, and the per-dtype tolerances of the float64 references.
#pragma once

#include <cuda.h>
#include <dlpack/dlpack.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "client/core/driver/cuda_driver.h"
#include "kiln/client.h"
#include "kiln/tensor_view.h"
#include "tests/support/daemon_process.h"
#include "tests/support/gpu_capability.h"
#include "tests/support/temp_dir.h"

namespace kiln::testing {

// Every driver call of a test is checked; a failure fails the test with the driver's words.
void CheckCuda(CUresult result, const char* what);
#define KILN_CU(expr) ::kiln::testing::CheckCuda((expr), #expr)

const client::CudaDriver& Driver();

// One call captured into a CUDA graph on a stream of its own, instantiated, and replayed there;
// the stream and graphs live as long as the object. status() is what the call returned while
// captured (no graph is instantiated unless it is OK).
class CapturedCall {
 public:
  explicit CapturedCall(const std::function<Status(CUstream stream)>& call);
  ~CapturedCall();
  CapturedCall(const CapturedCall&) = delete;
  CapturedCall& operator=(const CapturedCall&) = delete;
  const Status& status() const { return status_; }
  void Replay() const;  // launches the graph and waits for it

 private:
  CUstream stream_ = nullptr;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  Status status_;
};

// A test case's GPU: the context current, and a kilnd of its own that the client is configured
// to use (its cache fresh, or KILN_TEST_CACHE_DIR's when set).
class GpuSession {
 public:
  explicit GpuSession(int min_cc = 80, int max_cc = 0);  // rmsnorm's bf16 needs sm_80; see RequireGpu
  ~GpuSession();
  const GpuInfo& gpu() const { return gpu_; }
  DaemonProcess& daemon() { return *daemon_; }
  CUcontext context() const { return context_; }

 private:
  GpuInfo gpu_;
  TempDir dir_{"kiln-gpu"};
  std::unique_ptr<DaemonProcess> daemon_;
  CUcontext context_ = nullptr;
};

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* data() const { return reinterpret_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }
  void Upload(const std::vector<uint8_t>& host);
  std::vector<uint8_t> Download() const;
  void Poison();  // every byte 0xFF: NaN in fp32, fp16 and bf16; complete on return (any stream sees it)

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// Elements of one dtype in host memory (fp16 and bf16 rounded to nearest even, as the
// kernels' FromFloat: client/core/api/float16.h).
struct HostTensor {
  DType dtype = DType::kFloat32;
  std::vector<uint8_t> bytes;
  size_t size() const { return bytes.size() / DTypeSize(dtype); }
  float Get(size_t i) const;
  void Set(size_t i, float value);  // rounded to the dtype
};

HostTensor MakeHostTensor(DType dtype, size_t count);
// Uniform in [lo, hi), never all zeros; rounded to the dtype.
HostTensor RandomTensor(DType dtype, size_t count, std::mt19937& rng, float lo = -2.f, float hi = 2.f);

struct Tolerance {
  double abs;
  double rel;
};
// One output rounding to the dtype plus fp32 accumulation: fp32 1e-5, fp16 2e-3, bf16 1.6e-2.
Tolerance ToleranceFor(DType dtype);
bool Close(double got, double want, Tolerance t);

// A session on the sm_90a family only (wgmma, TMA: H100, H200): skipped visibly elsewhere, and
// on an sm_100 device too (it cannot run sm_90a cubins).
inline GpuSession HopperSession() { return GpuSession(kSm90aFamily, kSm90aFamily); }

// The DLTensor of `t` (a CUDA tensor of fp32, fp16, bf16, fp8 e4m3 or int32) for the C ABI's calls; it
// points into `t`, which must outlive it.
DLTensor ToDLTensor(const TensorView& t);

// `bytes` bytes of host memory at `data` as a vector (empty for 0), for DeviceBuffer::Upload.
std::vector<uint8_t> Bytes(const void* data, size_t bytes);

// Kernels this process fetched, from the daemon (GetKernel RPCs) or from the embedded engine:
// the op tests count fetches the same way in either mode (KILN_MODE=embedded on the GPU machine
// runs them without a daemon).
inline uint64_t KernelFetches(const ClientStats& s) { return s.get_kernel_rpcs + s.embedded_fetches; }
// A device copy of an int32 array (index arrays: indptrs, page tables; at least 4 bytes), and
// the contiguous int32 vector of its first `count` entries.
std::unique_ptr<DeviceBuffer> UploadInts(const std::vector<int32_t>& values);
TensorView IntView(const DeviceBuffer& buffer, size_t count);

}  // namespace kiln::testing
