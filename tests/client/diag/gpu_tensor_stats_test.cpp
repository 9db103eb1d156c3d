// [gpu][diag] kiln::client::diag::ComputeTensorStats on a real GPU through a real kilnd (the
// library's tensor_stats kernel), against a CPU reference over the same view (ReferenceStats):
// every dtype; fresh random data of varied magnitudes with NaN (quiet, negative, signalling
// payloads), +Inf and -Inf injected at random positions in float dtypes; dense tensors of
// awkward sizes at 16-byte-misaligned starts; padded, transposed, permuted, flipped, broadcast,
// overlapping, every-other-element and 8-dim views; a 0-d tensor and numel 1; 3e7+1 elements
// dense and 3e7 transposed; tensors with no finite element; numel above 2^32 (64-bit indices);
// stream order on a non-blocking stream; bitwise-repeatable results; a tensor on another
// device refused.
//
// Counts must be exact, min and max equal (the kernel and the reference widen the same
// elements to double). The mean must be within 1e-9 relative of the reference's long double
// mean, plus 1e-12 × mean(|x|): a floor for means that cancel towards 0, where a relative
// bound alone would ask more than double summation gives. The kernel's sum error is below
// (additions on any element's path ≈ 1100) × 2^-53 × sum(|x|) ≈ 1.2e-13 × n × mean(|x|).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "client/core/api/float16.h"
#include "client/diag/tensor_stats.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;
using kiln::client::diag::ComputeTensorStats;
using kiln::client::diag::TensorStats;
using kiln::testing::DeviceBuffer;
using kiln::testing::Driver;
using kiln::testing::GpuSession;

const DType kAllDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt8,
                            DType::kUInt8,   DType::kInt32,   DType::kInt64};

bool IsFloat(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

// One element of host bytes, widened to double as the kernel does.
double HostValue(DType dtype, const uint8_t* p) {
  switch (dtype) {
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return kiln::client::HalfToFloat(h);
    }
    case DType::kBFloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return kiln::client::BFloat16ToFloat(b);
    }
    case DType::kInt8: return static_cast<int8_t>(*p);
    case DType::kUInt8: return *p;
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DType::kFloat8E4M3: break;  // not a dtype of the stats kernel
  }
  FAIL("unknown dtype");
  return 0;
}

// A view into a buffer of `buffer` elements: data = buffer start + `base` elements.
struct Layout {
  std::string name;
  int64_t buffer = 0;
  int64_t base = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

Layout Dense(int64_t n, int64_t offset = 0) {
  return {"dense n=" + std::to_string(n) + " offset=" + std::to_string(offset), n + offset, offset, {n}, {1}};
}

// Every offset the view reaches lies inside its buffer (else the test itself is wrong).
void RequireInside(const Layout& l) {
  REQUIRE(l.shape.size() == l.strides.size());
  if (l.numel() == 0) return;
  int64_t lo = l.base, hi = l.base;
  for (size_t d = 0; d < l.shape.size(); ++d) {
    const int64_t reach = (l.shape[d] - 1) * l.strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  INFO(l.name);
  REQUIRE(lo >= 0);
  REQUIRE(hi < l.buffer);
}

struct Reference {
  int64_t count = 0, nan_count = 0, inf_count = 0, finite_count = 0;
  double min = 0, max = 0, mean = 0;
  double mean_abs = 0;  // mean(|x|) over the finite elements: the scale of the mean's error
};

// The statistics of the view's logical elements, one by one in row-major order; the sum in
// long double (64-bit mantissa: exact for every widened element and far finer than the GPU).
Reference ReferenceStats(const std::vector<uint8_t>& bytes, DType dtype, const Layout& l) {
  const size_t es = kiln::DTypeSize(dtype);
  Reference r;
  r.count = l.numel();
  if (r.count == 0) return r;
  long double sum = 0, sum_abs = 0;
  double min = std::numeric_limits<double>::infinity(), max = -min;
  std::vector<int64_t> index(l.shape.size(), 0);
  for (int64_t n = 0; n < r.count; ++n) {
    int64_t offset = l.base;
    for (size_t d = 0; d < index.size(); ++d) offset += index[d] * l.strides[d];
    const double v = HostValue(dtype, bytes.data() + static_cast<size_t>(offset) * es);
    if (std::isnan(v)) {
      ++r.nan_count;
    } else if (std::isinf(v)) {
      ++r.inf_count;
    } else {
      ++r.finite_count;
      min = std::min(min, v);
      max = std::max(max, v);
      sum += v;
      sum_abs += std::fabs(v);
    }
    for (size_t d = index.size(); d-- > 0;) {  // the next row-major index
      if (++index[d] < l.shape[d]) break;
      index[d] = 0;
    }
  }
  if (r.finite_count > 0) {
    r.min = min;
    r.max = max;
    r.mean = static_cast<double>(sum / r.finite_count);
    r.mean_abs = static_cast<double>(sum_abs / r.finite_count);
  }
  return r;
}

void CheckStats(const TensorStats& got, const Reference& want) {
  INFO("got count " << got.count << " nan " << got.nan_count << " inf " << got.inf_count << " finite "
                    << got.finite_count << " min " << got.min << " max " << got.max << " mean " << got.mean);
  INFO("want count " << want.count << " nan " << want.nan_count << " inf " << want.inf_count << " finite "
                     << want.finite_count << " min " << want.min << " max " << want.max << " mean " << want.mean);
  CHECK(got.count == want.count);
  CHECK(got.nan_count == want.nan_count);
  CHECK(got.inf_count == want.inf_count);
  CHECK(got.finite_count == want.finite_count);
  CHECK(got.min == want.min);
  CHECK(got.max == want.max);
  const double tolerance = 1e-9 * std::fabs(want.mean) + 1e-12 * want.mean_abs;
  CHECK(std::fabs(got.mean - want.mean) <= tolerance);
}

// `count` random elements of `dtype`. Floats: ±(0.5..1) × 2^(-10..10) (so min and max
// differ from their neighbours in many bits), then NaN (three payloads), +Inf and -Inf at
// random positions, 1 + count/400 of each kind. Integers: their whole range (int64: ±2^40,
// plus INT64_MAX and INT64_MIN + 1 when `int64_extremes`).
std::vector<uint8_t> RandomBytes(DType dtype, size_t count, std::mt19937_64& rng, bool int64_extremes = false) {
  const size_t es = kiln::DTypeSize(dtype);
  std::vector<uint8_t> bytes(count * es);
  std::uniform_real_distribution<float> mantissa(0.5f, 1.0f);
  std::uniform_int_distribution<int> exponent(-10, 10);
  std::uniform_int_distribution<int> sign(0, 1);
  std::uniform_int_distribution<int64_t> int64_values(-(int64_t{1} << 40), int64_t{1} << 40);
  std::uniform_int_distribution<int32_t> int32_values(std::numeric_limits<int32_t>::min(),
                                                      std::numeric_limits<int32_t>::max());
  std::uniform_int_distribution<int> byte_values(0, 255);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = bytes.data() + i * es;
    const float f = (sign(rng) ? -1.f : 1.f) * std::ldexp(mantissa(rng), exponent(rng));
    switch (dtype) {
      case DType::kFloat32: std::memcpy(p, &f, 4); break;
      case DType::kFloat16: {
        const uint16_t h = kiln::client::FloatToHalf(f);
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::kBFloat16: {
        const uint16_t b = kiln::client::FloatToBFloat16(f);
        std::memcpy(p, &b, 2);
        break;
      }
      case DType::kInt8:
      case DType::kUInt8: *p = static_cast<uint8_t>(byte_values(rng)); break;
      case DType::kInt32: {
        const int32_t v = int32_values(rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::kInt64: {
        const int64_t v = int64_values(rng);
        std::memcpy(p, &v, 8);
        break;
      }
      case DType::kFloat8E4M3: FAIL("fp8 is not a dtype of the stats kernel");
    }
  }
  if (dtype == DType::kInt64 && int64_extremes && count >= 2) {
    std::uniform_int_distribution<size_t> at(0, count - 1);
    const int64_t extremes[] = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min() + 1};
    for (int64_t v : extremes) std::memcpy(bytes.data() + at(rng) * 8, &v, 8);
  }
  if (IsFloat(dtype) && count > 0) {
    // Bit patterns: three NaNs (quiet, negative with a payload, signalling), +Inf, -Inf.
    uint32_t patterns[5];
    if (dtype == DType::kFloat32) {
      const uint32_t p32[] = {0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7F800000u, 0xFF800000u};
      std::memcpy(patterns, p32, sizeof(p32));
    } else if (dtype == DType::kFloat16) {
      const uint32_t p16[] = {0x7E00u, 0xFE01u, 0x7C01u, 0x7C00u, 0xFC00u};
      std::memcpy(patterns, p16, sizeof(p16));
    } else {
      const uint32_t pb16[] = {0x7FC0u, 0xFFC1u, 0x7F81u, 0x7F80u, 0xFF80u};
      std::memcpy(patterns, pb16, sizeof(pb16));
    }
    std::uniform_int_distribution<size_t> at(0, count - 1);
    const size_t each = 1 + count / 400;
    for (uint32_t pattern : patterns) {
      for (size_t k = 0; k < each; ++k) {
        uint8_t* p = bytes.data() + at(rng) * es;
        if (es == 4) {
          std::memcpy(p, &pattern, 4);
        } else {
          const uint16_t half = static_cast<uint16_t>(pattern);
          std::memcpy(p, &half, 2);
        }
      }
    }
  }
  return bytes;
}

TensorView ViewOf(const DeviceBuffer& buffer, DType dtype, const Layout& l, int device) {
  TensorView t;
  t.data = buffer.data() + l.base * static_cast<int64_t>(kiln::DTypeSize(dtype));
  t.dtype = dtype;
  t.ndim = static_cast<int>(l.shape.size());
  for (size_t d = 0; d < l.shape.size(); ++d) {
    t.shape[d] = l.shape[d];
    t.strides[d] = l.strides[d];
  }
  t.device = kiln::Device::CUDA(device);
  return t;
}

// Uploads `bytes`, runs ComputeTensorStats over the view on `stream` and checks it against
// the reference; returns what it got.
TensorStats RunAndCheck(const GpuSession& session, DType dtype, const Layout& l, const std::vector<uint8_t>& bytes,
                        CUstream stream = nullptr) {
  RequireInside(l);
  REQUIRE(bytes.size() == static_cast<size_t>(l.buffer) * kiln::DTypeSize(dtype));
  DeviceBuffer buffer(bytes.size());
  buffer.Upload(bytes);
  const TensorView t = ViewOf(buffer, dtype, l, session.gpu().ordinal);
  INFO(kiln::DTypeName(dtype) << " " << l.name << ": " << t.Describe());
  auto stats = ComputeTensorStats(t, stream);
  INFO(stats.status().ToString());
  REQUIRE(stats.ok());
  CheckStats(*stats, ReferenceStats(bytes, dtype, l));
  return *stats;
}

TEST_CASE("tensor stats match a CPU reference for every dtype on dense tensors of awkward sizes",
          "[gpu][diag][stats]") {
  GpuSession session;
  std::mt19937_64 rng(20250611);
  const int64_t sizes[] = {1, 2, 3, 7, 15, 16, 17, 31, 33, 255, 256, 257, 1000, 1023, 4097, 65537, 1000003};
  for (DType dtype : kAllDTypes) {
    for (int64_t n : sizes) {
      // Element offsets from a 256-byte aligned start: the kernel's unaligned head and tail.
      for (int64_t offset : {0, 1, 3}) {
        const Layout l = Dense(n, offset);
        RunAndCheck(session, dtype, l, RandomBytes(dtype, static_cast<size_t>(l.buffer), rng, true));
      }
    }
  }
}

TEST_CASE("tensor stats follow strided, transposed, flipped, broadcast and 8-dim views", "[gpu][diag][stats]") {
  GpuSession session;
  std::mt19937_64 rng(7);
  const std::vector<Layout> layouts = {
      {"padded rows [37, 129] stride 136", 37 * 136, 0, {37, 129}, {136, 1}},
      {"transposed [33, 64] of a dense [64, 33]", 64 * 33, 0, {33, 64}, {1, 33}},
      {"permuted [7, 5, 6] of a dense [5, 6, 7]", 5 * 6 * 7, 0, {7, 5, 6}, {1, 42, 7}},
      {"flipped [100] stride -1", 100, 99, {100}, {-1}},
      {"rows flipped [20, 30] strides [-30, 1]", 600, 570, {20, 30}, {-30, 1}},
      {"columns flipped [20, 30] strides [30, -1]", 600, 29, {20, 30}, {30, -1}},
      {"broadcast rows [50, 77] strides [0, 1]", 77, 0, {50, 77}, {0, 1}},
      {"broadcast columns [77, 50] strides [1, 0]", 77, 0, {77, 50}, {1, 0}},
      {"every other element [500] stride 2", 1000, 0, {500}, {2}},
      {"overlapping [10, 10] strides [1, 1]", 19, 0, {10, 10}, {1, 1}},
      {"padded inner dims [9, 4, 11] strides [60, 15, 1]", 9 * 60, 0, {9, 4, 11}, {60, 15, 1}},
      {"8-dim, odd sizes, inner stride 2",
       2 * 3 * 1 * 2 * 3 * 2 * 1 * 5 * 2 + 1,
       1,
       {2, 3, 1, 2, 3, 2, 1, 5},
       {360, 120, 120, 60, 20, 10, 10, 2}},
      {"8-dim, every dim permuted and one flipped",
       2 * 3 * 2 * 3 * 2 * 5 * 2 * 3,
       540,
       {3, 2, 5, 3, 2, 3, 2, 2},
       {1, 3, 6, 30, 90, 180, -540, 1080}},
      {"0-d", 16, 5, {}, {}},
      {"numel 1 of rank 3, strides ignored", 16, 9, {1, 1, 1}, {7, 100, -3}},
  };
  for (DType dtype : kAllDTypes) {
    for (const Layout& l : layouts) {
      RunAndCheck(session, dtype, l, RandomBytes(dtype, static_cast<size_t>(l.buffer), rng));
    }
  }
}

TEST_CASE("tensor stats of 3e7+1 dense and 3e7 transposed elements match the reference", "[gpu][diag][stats]") {
  GpuSession session;
  std::mt19937_64 rng(31);
  const Layout dense = Dense(30000001);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
    RunAndCheck(session, dtype, dense, RandomBytes(dtype, static_cast<size_t>(dense.buffer), rng, true));
  }
  const Layout transposed = {
      "transposed [6001, 5000] of a dense [5000, 6001]", 5000 * 6001, 0, {6001, 5000}, {1, 6001}};
  RunAndCheck(session, DType::kFloat32, transposed, RandomBytes(DType::kFloat32, 5000 * 6001, rng));
  const Layout padded = {"padded rows [6000, 5000] stride 5003", 6000 * 5003, 0, {6000, 5000}, {5003, 1}};
  RunAndCheck(session, DType::kFloat16, padded, RandomBytes(DType::kFloat16, 6000 * 5003, rng));
}

TEST_CASE("tensor stats of a tensor without finite elements are counts and zeros", "[gpu][diag][stats]") {
  GpuSession session;
  const int64_t n = 1001;
  struct Case {
    DType dtype;
    std::vector<uint32_t> patterns;  // repeated over the tensor
    int64_t nan, inf;
  };
  const Case cases[] = {
      {DType::kFloat32, {0x7FC00000u}, n, 0},
      {DType::kFloat16, {0x7E00u, 0x7C00u, 0xFC00u}, 334, 667},
      {DType::kBFloat16, {0x7F80u, 0xFF80u}, 0, n},
  };
  for (const Case& c : cases) {
    const size_t es = kiln::DTypeSize(c.dtype);
    std::vector<uint8_t> bytes(static_cast<size_t>(n) * es);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t pattern = c.patterns[static_cast<size_t>(i) % c.patterns.size()];
      if (es == 4) {
        std::memcpy(bytes.data() + i * 4, &pattern, 4);
      } else {
        const uint16_t half = static_cast<uint16_t>(pattern);
        std::memcpy(bytes.data() + i * 2, &half, 2);
      }
    }
    const TensorStats s = RunAndCheck(session, c.dtype, Dense(n), bytes);
    CHECK(s.nan_count == c.nan);
    CHECK(s.inf_count == c.inf);
    CHECK(s.finite_count == 0);
    CHECK(s.min == 0);
    CHECK(s.max == 0);
    CHECK(s.mean == 0);
  }
}

TEST_CASE("tensor stats count more than 2^32 elements through 64-bit indices", "[gpu][diag][stats]") {
  GpuSession session;
  const int64_t rows = 65537, cols = 65539, pitch = 65540;  // rows * cols > 2^32
  const uint64_t bytes = static_cast<uint64_t>(rows) * pitch;
  if (session.gpu().total_memory < bytes * 2) {
    WARN("skipped: " << session.gpu().name << " has " << session.gpu().total_memory << " bytes; the case needs a "
                     << bytes << "-byte buffer");
    return;
  }
  DeviceBuffer buffer(bytes);
  const CUdeviceptr base = reinterpret_cast<CUdeviceptr>(buffer.data());
  KILN_CU(Driver().cuMemsetD8(base, 7, bytes));
  // Values inside the view (first element, one in the middle, the last) and in the padding
  // column (which the strided view must skip and the whole buffer must count).
  struct Poke {
    int64_t row, col;
    uint8_t value;
  };
  const Poke inside[] = {{0, 0, 1}, {40000, 12345, 3}, {rows - 1, cols - 1, 200}};
  const Poke padding[] = {{5, pitch - 1, 0}, {rows - 1, pitch - 1, 255}};
  for (const Poke& p : inside) KILN_CU(Driver().cuMemcpyHtoD(base + p.row * pitch + p.col, &p.value, 1));
  for (const Poke& p : padding) KILN_CU(Driver().cuMemcpyHtoD(base + p.row * pitch + p.col, &p.value, 1));

  const int device = session.gpu().ordinal;
  {
    const TensorView view = TensorView::Strided(buffer.data(), DType::kUInt8, {rows, cols}, {pitch, 1},
                                                kiln::Device::CUDA(device));
    auto stats = ComputeTensorStats(view, nullptr);
    INFO(view.Describe() << ": " << stats.status().ToString());
    REQUIRE(stats.ok());
    const int64_t numel = rows * cols;
    long double sum = 7.0L * (numel - 3);
    for (const Poke& p : inside) sum += p.value;
    Reference want;
    want.count = want.finite_count = numel;
    want.min = 1;
    want.max = 200;
    want.mean = static_cast<double>(sum / numel);
    want.mean_abs = want.mean;
    CheckStats(*stats, want);
  }
  {
    const int64_t numel = rows * pitch;
    const TensorView whole = TensorView::Contiguous(buffer.data(), DType::kUInt8, {numel}, kiln::Device::CUDA(device));
    auto stats = ComputeTensorStats(whole, nullptr);
    INFO(whole.Describe() << ": " << stats.status().ToString());
    REQUIRE(stats.ok());
    long double sum = 7.0L * (numel - 5);
    for (const Poke& p : inside) sum += p.value;
    for (const Poke& p : padding) sum += p.value;
    Reference want;
    want.count = want.finite_count = numel;
    want.min = 0;
    want.max = 255;
    want.mean = static_cast<double>(sum / numel);
    want.mean_abs = want.mean;
    CheckStats(*stats, want);
  }
}

TEST_CASE("tensor stats run in stream order and repeat bit for bit", "[gpu][diag][stats]") {
  GpuSession session;
  CUstream stream = nullptr;
  KILN_CU(Driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const int device = session.gpu().ordinal;

  // A memset queued on a non-blocking stream is seen by statistics on that stream without any
  // other wait: the kernel runs on the caller's stream, after the stream's earlier work.
  const int64_t n = 64 << 20;
  DeviceBuffer buffer(static_cast<size_t>(n));
  KILN_CU(Driver().cuMemsetD8(reinterpret_cast<CUdeviceptr>(buffer.data()), 3, static_cast<size_t>(n)));
  for (int value : {9, 11, 2}) {
    KILN_CU(Driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(buffer.data()), static_cast<unsigned char>(value),
                                     static_cast<size_t>(n), stream));
    auto stats = ComputeTensorStats(
        TensorView::Contiguous(buffer.data(), DType::kInt8, {n}, kiln::Device::CUDA(device)), stream);
    INFO(stats.status().ToString());
    REQUIRE(stats.ok());
    CHECK(stats->min == value);
    CHECK(stats->max == value);
    CHECK(stats->mean == value);
    CHECK(stats->finite_count == n);
  }

  // The same tensor twice, on the legacy and on the non-blocking stream: identical bits (one
  // record per block, combined in block order; no atomics).
  std::mt19937_64 rng(5);
  const Layout l = {"padded rows [999, 1001] stride 1003", 999 * 1003, 0, {999, 1001}, {1003, 1}};
  const std::vector<uint8_t> bytes = RandomBytes(DType::kFloat32, static_cast<size_t>(l.buffer), rng);
  DeviceBuffer data(bytes.size());
  data.Upload(bytes);
  const TensorView t = ViewOf(data, DType::kFloat32, l, device);
  auto first = ComputeTensorStats(t, nullptr);
  auto second = ComputeTensorStats(t, stream);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CheckStats(*first, ReferenceStats(bytes, DType::kFloat32, l));
  CHECK(std::memcmp(&*first, &*second, sizeof(TensorStats)) == 0);
  KILN_CU(Driver().cuStreamDestroy(stream));
}

TEST_CASE("tensor stats refuse a tensor of a device other than the current context's", "[gpu][diag][stats]") {
  GpuSession session;
  DeviceBuffer buffer(64);
  const int other = session.gpu().ordinal + 1;
  auto stats = ComputeTensorStats(
      TensorView::Contiguous(buffer.data(), DType::kFloat32, {16}, kiln::Device::CUDA(other)), nullptr);
  INFO(stats.status().ToString());
  REQUIRE(!stats.ok());
  CHECK(stats.status().code() == StatusCode::kInvalidArgument);
  CHECK(stats.status().message().find("kiln::client::diag::ComputeTensorStats: ") == 0);
  CHECK(stats.status().message().find("cuda:" + std::to_string(other)) != std::string::npos);
}

}  // namespace
