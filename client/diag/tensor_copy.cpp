#include "client/diag/tensor_copy.h"

#include <cstring>
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"

namespace kiln::client::diag {
namespace {

// Calls f(element offset of the view, row-major index) for every element.
template <typename F>
void ForEachElement(const TensorView& t, F&& f) {
  const int64_t n = t.numel();
  if (n <= 0) return;
  int64_t index[kMaxTensorDims] = {};
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(offset, i);
    for (int d = t.ndim - 1; d >= 0; --d) {  // odometer over the dims, last fastest
      offset += t.strides[d];
      if (++index[d] < t.shape[d]) break;
      offset -= t.strides[d] * t.shape[d];
      index[d] = 0;
    }
  }
}

}  // namespace

ElementSpan CoveringSpan(const TensorView& t) {
  if (t.ndim < 0 || t.ndim > kMaxTensorDims || t.numel() <= 0) return {};
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < t.ndim; ++d) {
    const int64_t reach = (t.shape[d] - 1) * t.strides[d];
    if (reach < 0) lo += reach;
    else hi += reach;
  }
  return {lo, hi + 1};
}

bool NeedsDriverCopy(const Device& device) {
  return device.type == DeviceType::kCUDA || device.type == DeviceType::kCUDAManaged;
}

void ScatterInto(const TensorView& t, const std::vector<uint8_t>& values, int64_t span_begin,
                 std::vector<uint8_t>* span) {
  const size_t es = DTypeSize(t.dtype);
  ForEachElement(t, [&](int64_t offset, int64_t i) {
    std::memcpy(span->data() + static_cast<size_t>(offset - span_begin) * es,
                values.data() + static_cast<size_t>(i) * es, es);
  });
}

std::vector<uint8_t> GatherFrom(const TensorView& t, const uint8_t* span, int64_t span_begin) {
  const size_t es = DTypeSize(t.dtype);
  const int64_t n = t.numel();
  std::vector<uint8_t> out(n > 0 ? static_cast<size_t>(n) * es : 0);
  ForEachElement(t, [&](int64_t offset, int64_t i) {
    std::memcpy(out.data() + static_cast<size_t>(i) * es, span + static_cast<size_t>(offset - span_begin) * es, es);
  });
  return out;
}

StatusOr<std::vector<uint8_t>> ReadTensor(const TensorView& t, void* stream) {
  if (t.ndim < 0 || t.ndim > kMaxTensorDims)
    return InvalidArgument("a tensor of rank " + std::to_string(t.ndim) + " cannot be read");
  const ElementSpan span = CoveringSpan(t);
  if (span.end == span.begin) return std::vector<uint8_t>();
  const size_t es = DTypeSize(t.dtype);
  const uint8_t* first = static_cast<const uint8_t*>(t.data) + span.begin * static_cast<int64_t>(es);
  const size_t bytes = static_cast<size_t>(span.end - span.begin) * es;
  if (!NeedsDriverCopy(t.device)) return GatherFrom(t, first, span.begin);  // host memory: read in place

  KILN_ASSIGN_OR_RETURN(auto driver, CudaDriver::Get());
  std::vector<uint8_t> image(bytes);
  const CudaDriver& d = *driver;
  const CUstream s = static_cast<CUstream>(stream);
  KILN_RETURN_IF_ERROR(d.Check(d.cuMemcpyDtoHAsync(image.data(), reinterpret_cast<CUdeviceptr>(first), bytes, s),
                               "cuMemcpyDtoHAsync(" + t.Describe() + ")"));
  KILN_RETURN_IF_ERROR(d.Check(d.cuStreamSynchronize(s), "cuStreamSynchronize"));
  return GatherFrom(t, image.data(), span.begin);
}

}  // namespace kiln::client::diag
