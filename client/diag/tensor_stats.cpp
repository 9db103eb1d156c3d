#include "client/diag/tensor_stats.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/current_context.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "kiln/diag/diag_contract.h"

namespace kiln::client::diag {
namespace {

constexpr const char* kApi = "kiln::client::diag::ComputeTensorStats";
// One cubin per dtype: the shape and strides are launch arguments (kiln/diag/diag_contract.h).
struct StatsSpec {
  DType dtype = DType::kFloat32;
  bool operator==(const StatsSpec&) const = default;
  auto Fields() const { return std::tie(dtype); }
  std::map<std::string, std::string> Params() const { return {{kParamDType, DTypeName(dtype)}}; }
};

const OpKernels kStatsKernels = {::kiln::diag::kTensorStatsOp,
                                 {{{.name = ::kiln::diag::kTensorStatsEntry, .min_block = 32}}}};

// numel and the span of addresses a view covers stay below these, so that no index, offset or
// byte address of the kernel (64-bit, signed) can overflow.
constexpr int64_t kMaxNumel = int64_t{1} << 62;
constexpr int64_t kMaxSpanBytes = int64_t{1} << 60;

// The kernel's structs (the contract's namespace kiln::diag, not this one).
using LayoutAbi = ::kiln::diag::TensorStatsLayout;
using PartialAbi = ::kiln::diag::TensorStatsPartial;
constexpr int kMaxStatsDims = ::kiln::diag::kMaxStatsDims;
static_assert(kMaxTensorDims <= kMaxStatsDims, "the kernel's layout must hold every TensorView rank");

bool KnownDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt32:
    case DType::kInt64: return true;
    case DType::kFloat8E4M3: return false;  // the stats kernel does not read fp8 yet
  }
  return false;
}

// What the kernel is launched on: the view's first address after negative strides are
// flipped, numel, and the normalized layout.
struct StatsView {
  uintptr_t data = 0;
  int64_t numel = 0;
  LayoutAbi layout = {};
};

// Every check that needs no driver, then the layout the kernel reads. The statistics do not
// depend on the order of the elements, so the layout is normalized for speed with the same
// multiset of element addresses: size-1 dims dropped, a negative stride flipped (the base
// moves to the dim's last element), dims ordered outer to inner (broadcast stride-0 dims
// outermost, then by decreasing stride, so the innermost dim is the densest), and each dim
// merged into the one outside it when that one steps over it exactly. A dense tensor, also a
// transposed or flipped one, becomes ndim 1, stride 1: the kernel's contiguous path.
StatusOr<StatsView> PrepareView(const TensorView& t) {
  if (t.ndim < 0 || t.ndim > kMaxTensorDims)
    return InvalidArgument("t", "expected a tensor of rank 0 to " + std::to_string(kMaxTensorDims) + ", found rank " +
                                    std::to_string(t.ndim) +
                                    (t.ndim < 0 ? " (TensorView::Contiguous and ::Strided give -1 for more than " +
                                                      std::to_string(kMaxTensorDims) +
                                                      " dims or a strides count unlike the shape's)"
                                                : std::string()));
  if (!KnownDType(t.dtype))
    return InvalidArgument("t", "unknown dtype (kiln::DType value " + std::to_string(static_cast<int>(t.dtype)) +
                                    "); expected fp32, fp16, bf16, int8, uint8, int32 or int64");
  if (t.device.type != DeviceType::kCUDA)
    return InvalidArgument("t", "expected a CUDA device tensor, found one on " + DeviceName(t.device) +
                                    " (statistics run on the tensor's GPU)");
  if (t.device.index < 0)
    return InvalidArgument("t", "device ordinal " + std::to_string(t.device.index) + " is negative");

  __int128 numel = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0)
      return InvalidArgument("t", "dim " + std::to_string(d) + " has negative size " + std::to_string(t.shape[d]) +
                                      " in " + t.Describe());
    numel = std::min<__int128>(numel * t.shape[d], __int128{kMaxNumel} + 1);  // saturates: no overflow
  }
  if (numel > kMaxNumel) return InvalidArgument("t", "more than 2^62 elements in " + t.Describe());
  StatsView view;
  view.numel = static_cast<int64_t>(numel);
  if (view.numel == 0) return view;

  const int64_t element = static_cast<int64_t>(DTypeSize(t.dtype));
  const uintptr_t data = reinterpret_cast<uintptr_t>(t.data);
  if (data == 0)
    return InvalidArgument("t", "data is null, but the tensor has " + std::to_string(view.numel) + " elements");
  if (data % static_cast<uintptr_t>(element) != 0)
    return InvalidArgument("t", "data " + PointerText(data) + " is not aligned to the element size (" +
                                    std::to_string(element) + " bytes of " + DTypeName(t.dtype) + ")");

  struct Dim {
    int64_t size;
    int64_t stride;
  };
  Dim dims[kMaxTensorDims];
  int ndim = 0;
  __int128 span = 0;        // elements between the lowest and the highest address
  __int128 base_shift = 0;  // elements from t.data to the lowest address
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] == 1) continue;  // its stride is never used
    const __int128 stride = t.strides[d];
    const __int128 reach = (t.shape[d] - 1) * (stride < 0 ? -stride : stride);
    span += reach;  // < 2^127: each reach is below 2^126, and the sum is checked each step
    if (span > kMaxSpanBytes / element)
      return InvalidArgument("t", "the strides span more than 2^60 bytes: " + t.Describe());
    if (stride < 0) base_shift -= reach;
    dims[ndim++] = {t.shape[d], static_cast<int64_t>(stride < 0 ? -stride : stride)};
  }
  std::stable_sort(dims, dims + ndim, [](const Dim& a, const Dim& b) {
    if ((a.stride == 0) != (b.stride == 0)) return a.stride == 0;  // broadcast dims outermost
    return a.stride > b.stride;
  });
  int merged = 0;
  for (int d = 0; d < ndim; ++d) {
    // stride * size <= 2 * span < 2^61: no overflow.
    if (merged > 0 && dims[merged - 1].stride == dims[d].stride * dims[d].size) {
      dims[merged - 1] = {dims[merged - 1].size * dims[d].size, dims[d].stride};
    } else {
      dims[merged++] = dims[d];
    }
  }
  if (merged == 0) dims[merged++] = {1, 1};  // one element: a 0-d tensor or only size-1 dims

  view.data = data + static_cast<uintptr_t>(static_cast<int64_t>(base_shift) * element);
  view.layout.ndim = merged;
  for (int d = 0; d < merged; ++d) {
    view.layout.shape[d] = dims[d].size;
    view.layout.strides[d] = dims[d].stride;
  }
  return view;
}

// Device memory for the kernel's partial records, reused across calls rather than allocated
// and freed each time: cuMemFree synchronizes the whole device (other streams' work
// included), and neither call is allowed while another thread captures a CUDA graph in
// global mode. A mutex guards only the free list, never a launch, so calls of two threads on
// two streams run side by side, each with its own buffer. Buffers live as long as the
// process, like loaded modules, keyed by context like the launch cache; one is max_blocks × 48 B
// (48 KiB), and a context holds as many as statistics calls ever ran at once in it.
class PartialsPool {
 public:
  static PartialsPool& Global() {
    static PartialsPool* pool = new PartialsPool();  // never destroyed: used until exit
    return *pool;
  }

  // A buffer of at least `bytes` in `context`, which is current on this thread.
  StatusOr<CUdeviceptr> Take(const CudaDriver& driver, CUcontext context, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].context == context && free_[i].bytes >= bytes) {
          const CUdeviceptr ptr = free_[i].ptr;
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return ptr;
        }
      }
    }
    CUdeviceptr ptr = 0;
    KILN_RETURN_IF_ERROR(driver.Check(driver.cuMemAlloc(&ptr, bytes),
                                      "cuMemAlloc(" + std::to_string(bytes) + " B for the partial records)"));
    return ptr;
  }

  void Give(CUcontext context, CUdeviceptr ptr, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back({context, ptr, bytes});
  }

 private:
  struct Buffer {
    CUcontext context;
    CUdeviceptr ptr;
    size_t bytes;
  };
  std::mutex mu_;
  std::vector<Buffer> free_;
};

// The blocks' records, in block order (deterministic), into the caller's statistics.
Status Combine(const std::vector<PartialAbi>& partials, int64_t numel, TensorStats* stats) {
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double sum = 0;
  for (const PartialAbi& p : partials) {
    stats->nan_count += p.nan_count;
    stats->inf_count += p.inf_count;
    stats->finite_count += p.finite_count;
    if (p.finite_count > 0) {
      min = std::min(min, p.min);
      max = std::max(max, p.max);
      sum += p.sum;
    }
  }
  // Every element lands in exactly one count: anything else is a kernel or layout bug.
  if (stats->nan_count + stats->inf_count + stats->finite_count != numel)
    return Status(StatusCode::kInternal, std::string(kApi) + ": the kernel classified " +
                                             std::to_string(stats->nan_count + stats->inf_count + stats->finite_count) +
                                             " elements of " + std::to_string(numel));
  stats->count = numel;
  if (stats->finite_count > 0) {
    stats->min = min;
    stats->max = max;
    stats->mean = sum / static_cast<double>(stats->finite_count);
  }
  return OkStatus();
}

}  // namespace

StatusOr<TensorStats> ComputeTensorStats(const TensorView& t, void* stream) {
  // The checks name the argument ("t: ..."); the API goes in front, as for every error here.
  auto prepared = PrepareView(t);
  if (!prepared.ok()) return prepared.status().WithContext(kApi);
  const StatsView& view = *prepared;
  TensorStats stats;
  if (view.numel == 0) return stats;  // nothing to look at, and nothing to launch

  auto driver_or = CudaDriver::Get();
  if (!driver_or.ok()) return driver_or.status().WithContext(kApi);
  const CudaDriver& driver = **driver_or;
  // The caller promises no capture; a capture that slipped through is refused (before any
  // module load) rather than invalidated by the synchronization below.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  KILN_RETURN_IF_ERROR(
      driver.Check(driver.cuStreamIsCapturing(static_cast<CUstream>(stream), &capture), "cuStreamIsCapturing")
          .WithContext(kApi));
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return Status(StatusCode::kFailedPrecondition,
                  std::string(kApi) + ": the stream is capturing a CUDA graph; statistics wait for the stream, "
                                      "which a capture does not allow");

  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready,
                        PrepareOpLaunch(kStatsKernels, StatsSpec{t.dtype}, t.device.index, kApi));
  const CUcontext context = ready.context;
  const EntryLaunchReady& e = ready.launch->entry();
  int64_t blocks = (view.numel + e.block - 1) / e.block;
  // The records' buffer bounds the grid: 48 MiB of records at most, whatever the hint says.
  blocks = std::min<int64_t>(blocks, e.max_blocks > 0 ? std::min<int64_t>(e.max_blocks, 1 << 20) : 1 << 20);
  const size_t bytes = static_cast<size_t>(blocks) * sizeof(PartialAbi);
  PartialsPool& pool = PartialsPool::Global();
  auto buffer = pool.Take(driver, context, bytes);
  if (!buffer.ok()) return buffer.status().WithContext(kApi);

  ::kiln::diag::TensorStatsParams params = {reinterpret_cast<PartialAbi*>(*buffer),
                                            reinterpret_cast<const void*>(view.data), view.numel, view.layout};
  void* args[] = {&params};
  LaunchConfig config;
  config.grid.x = static_cast<unsigned>(blocks);
  config.block.x = e.block;
  config.dynamic_smem_bytes = e.dynamic_smem;
  config.stream = stream;
  if (Status s = LaunchFunction(driver, e.function, config, args, ::kiln::diag::kTensorStatsEntry,
                                &ready.launch->library->info);
      !s.ok()) {
    pool.Give(context, *buffer, bytes);  // nothing was launched
    return s.WithContext(kApi);
  }
  std::vector<PartialAbi> partials(static_cast<size_t>(blocks));
  const Status copied = driver.Check(driver.cuMemcpyDtoHAsync(partials.data(), *buffer, bytes,
                                                              static_cast<CUstream>(stream)),
                                     "cuMemcpyDtoHAsync(partial records)");
  const Status synced = driver.Check(driver.cuStreamSynchronize(static_cast<CUstream>(stream)), "cuStreamSynchronize");
  // After a failed wait the kernel may still write the buffer: it is not reused (48 KiB lost).
  if (!synced.ok()) return synced.WithContext(kApi);
  pool.Give(context, *buffer, bytes);
  if (!copied.ok()) return copied.WithContext(kApi);
  KILN_RETURN_IF_ERROR(Combine(partials, view.numel, &stats));
  return stats;
}

}  // namespace kiln::client::diag
