// [gpu] kiln::ops::silu_and_mul, gelu_and_mul and gelu_tanh_and_mul (and their C ABI) on a real
// GPU through a real kilnd, against a float64 CPU reference (ReferenceActAndMul): fp16 and
// bf16 × d 1/3/7/64/4095/14336 × rows 1/5/1000, padded and odd row strides, pointers one
// element off, d that allow only 2- or 4-element vectors, a 3-D input; fresh random data
// (uniform in [-5, 5), never zero), outputs poisoned with NaN before each launch, padding
// checked untouched, input checked unchanged. Tolerances (abs and rel) per dtype: fp16 2e-3,
// bf16 1.6e-2 (one rounding of the output; see gpu_harness.cpp). Unsupported dtypes and
// shapes are refused with a clear error and launch nothing.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kiln/client.h"
#include "kiln/kernel.h"
#include "kiln/ops/activation.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::testing::DeviceBuffer;
using kiln::testing::GpuSession;
using kiln::testing::HostTensor;

enum class Act { kSilu, kGelu, kGeluTanh };

struct OpCase {
  Act act;
  const char* name;
  kiln::Status (*call)(const TensorView& out, const TensorView& input, void* stream);
};
const OpCase kOps[] = {{Act::kSilu, "silu_and_mul", kiln::ops::silu_and_mul},
                       {Act::kGelu, "gelu_and_mul", kiln::ops::gelu_and_mul},
                       {Act::kGeluTanh, "gelu_tanh_and_mul", kiln::ops::gelu_tanh_and_mul}};
const DType kDTypes[] = {DType::kFloat16, DType::kBFloat16};
const int64_t kRows[] = {1, 5, 1000};
const int64_t kD[] = {1, 3, 7, 64, 4095, 14336};

constexpr double kPi = 3.14159265358979323846;

// The float64 reference of the three ops (kernels/traces/*.json name it): act(x) * y.
double ReferenceActAndMul(Act act, double x, double y) {
  double a = 0;
  switch (act) {
    case Act::kSilu: a = x / (1.0 + std::exp(-x)); break;
    case Act::kGelu: a = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); break;
    case Act::kGeluTanh: a = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x))); break;
  }
  return a * y;
}

struct Layout {
  int64_t in_pad = 0;   // extra elements after each input row (row stride 2d + in_pad)
  int64_t out_pad = 0;  // ... after each out row
  int64_t offset = 0;   // elements both pointers are moved by (misaligns vectors)
};

std::string Describe(const OpCase& op, DType d, int64_t rows, int64_t dim, const Layout& l) {
  return std::string(op.name) + " " + kiln::DTypeName(d) + " rows=" + std::to_string(rows) +
         " d=" + std::to_string(dim) + " pads=" + std::to_string(l.in_pad) + "/" + std::to_string(l.out_pad) +
         " offset=" + std::to_string(l.offset);
}

// Runs every op on one fresh random input [rows, 2d] (shaped `leading` + [2d] when given)
// and checks each output element, the out padding (still poison) and the input (unchanged).
void CheckOps(DType dtype, int64_t rows, int64_t d, const Layout& l, std::mt19937& rng, CUstream stream,
              std::vector<int64_t> leading = {}) {
  const size_t es = kiln::DTypeSize(dtype);
  const int64_t in_stride = 2 * d + l.in_pad;
  const int64_t out_stride = d + l.out_pad;
  HostTensor in = kiln::testing::RandomTensor(dtype, static_cast<size_t>(rows * in_stride + l.offset), rng, -5.f, 5.f);
  DeviceBuffer din(in.bytes.size());
  din.Upload(in.bytes);
  DeviceBuffer dout(static_cast<size_t>(rows * out_stride + l.offset) * es);
  char* in_ptr = din.data() + l.offset * es;
  char* out_ptr = dout.data() + l.offset * es;
  TensorView tin, tout;
  if (leading.empty()) {
    tin = TensorView::Strided(in_ptr, dtype, {rows, 2 * d}, {in_stride, 1});
    tout = TensorView::Strided(out_ptr, dtype, {rows, d}, {out_stride, 1});
  } else {  // dense, leading dims multiplying to rows
    REQUIRE(leading.size() == 2);
    REQUIRE(leading[0] * leading[1] == rows);
    REQUIRE((l.in_pad == 0 && l.out_pad == 0));
    tin = TensorView::Contiguous(in_ptr, dtype, {leading[0], leading[1], 2 * d});
    tout = TensorView::Contiguous(out_ptr, dtype, {leading[0], leading[1], d});
  }
  const auto tol = kiln::testing::ToleranceFor(dtype);

  for (const OpCase& op : kOps) {
    INFO(Describe(op, dtype, rows, d, l));
    dout.Poison();
    // The upload and memset ran on the legacy stream, which a non-blocking `stream` does not
    // wait for: finish them before the launch.
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    const kiln::Status status = op.call(tout, tin, stream);
    INFO(status.ToString());
    REQUIRE(status.ok());
    KILN_CU(kiln::testing::Driver().cuStreamSynchronize(stream));
    const HostTensor out{dtype, dout.Download()};

    int64_t bad = 0, touched = 0;
    std::string first_bad;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < d; ++i) {
        const double x = in.Get(static_cast<size_t>(l.offset + r * in_stride + i));
        const double y = in.Get(static_cast<size_t>(l.offset + r * in_stride + d + i));
        const double want = ReferenceActAndMul(op.act, x, y);
        const double got = out.Get(static_cast<size_t>(l.offset + r * out_stride + i));
        if (!kiln::testing::Close(got, want, tol) && bad++ == 0)
          first_bad = "row " + std::to_string(r) + " col " + std::to_string(i) + ": x " + std::to_string(x) + " y " +
                      std::to_string(y) + ": got " + std::to_string(got) + ", want " + std::to_string(want);
      }
    }
    // Outside the rows (offset, padding) every byte is still poison.
    for (size_t i = 0; i < out.size(); ++i) {
      const int64_t e = static_cast<int64_t>(i) - l.offset;
      const bool in_rows = e >= 0 && e / out_stride < rows && e % out_stride < d;
      if (!in_rows && (out.bytes[i * es] != 0xFF || out.bytes[i * es + 1] != 0xFF)) ++touched;
    }
    INFO("first mismatch: " << first_bad);
    CHECK(bad == 0);
    CHECK(touched == 0);
  }
  CHECK(din.Download() == in.bytes);  // input is only read
}

TEST_CASE("activation ops match a float64 reference over every dtype x d x rows", "[gpu][client][ops][activation]") {
  GpuSession session;
  std::mt19937 rng(20251130);
  for (DType dtype : kDTypes)
    for (int64_t rows : kRows)
      for (int64_t d : kD) CheckOps(dtype, rows, d, {}, rng, nullptr);
}

TEST_CASE("activation ops handle padded strides and misaligned pointers and 3-D input",
          "[gpu][client][ops][activation]") {
  GpuSession session;
  std::mt19937 rng(7);
  CUstream stream = nullptr;
  KILN_CU(kiln::testing::Driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (DType dtype : kDTypes) {
    CheckOps(dtype, 7, 4096, {.in_pad = 8}, rng, stream);  // padded input rows: vec 8
    CheckOps(dtype, 7, 4096, {.in_pad = 1}, rng, stream);  // odd input row stride: vec 1
    CheckOps(dtype, 7, 4096, {.in_pad = 24, .out_pad = 40}, rng, stream);
    CheckOps(dtype, 5, 14336, {.out_pad = 4}, rng, stream);  // out stride allows vec 4
    CheckOps(dtype, 7, 4096, {.offset = 1}, rng, stream);    // pointers one element off
    CheckOps(dtype, 1000, 4098, {}, rng, stream);            // d allows vec 2
    CheckOps(dtype, 5, 4100, {.in_pad = 4}, rng, stream);    // vec 4
    CheckOps(dtype, 15, 1024, {}, rng, stream, {3, 5});      // [3, 5, 2048] → [3, 5, 1024]
  }
  KILN_CU(kiln::testing::Driver().cuStreamDestroy(stream));
}

TEST_CASE("activation ops are exact at the tails where large |x| gives 0 or x*y and never NaN",
          "[gpu][client][ops][activation]") {
  GpuSession session;
  const std::vector<float> xs = {-100.f, -30.f, -10.f, -3.f, -1e-3f, 1e-3f, 0.5f, 3.f, 10.f, 30.f, 100.f};
  for (DType dtype : kDTypes) {
    const int64_t d = static_cast<int64_t>(xs.size());
    HostTensor in = kiln::testing::MakeHostTensor(dtype, static_cast<size_t>(2 * d));
    for (int64_t i = 0; i < d; ++i) {
      in.Set(static_cast<size_t>(i), xs[static_cast<size_t>(i)]);
      in.Set(static_cast<size_t>(d + i), -1.5f);
    }
    DeviceBuffer din(in.bytes.size()), dout(static_cast<size_t>(d) * kiln::DTypeSize(dtype));
    din.Upload(in.bytes);
    for (const OpCase& op : kOps) {
      INFO(op.name << " " << kiln::DTypeName(dtype));
      dout.Poison();
      auto status = op.call(TensorView::Contiguous(dout.data(), dtype, {1, d}),
                            TensorView::Contiguous(din.data(), dtype, {1, 2 * d}), nullptr);
      INFO(status.ToString());
      REQUIRE(status.ok());
      KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
      const HostTensor out{dtype, dout.Download()};
      for (int64_t i = 0; i < d; ++i) {
        const double x = in.Get(static_cast<size_t>(i));
        const double want = ReferenceActAndMul(op.act, x, -1.5);
        INFO("x = " << x << ": got " << out.Get(static_cast<size_t>(i)) << ", want " << want);
        CHECK(kiln::testing::Close(out.Get(static_cast<size_t>(i)), want, kiln::testing::ToleranceFor(dtype)));
      }
    }
  }
}

TEST_CASE("the activation C ABI matches the reference on DLTensors", "[gpu][client][capi][activation]") {
  GpuSession session;
  std::mt19937 rng(99);
  const DType dtype = DType::kBFloat16;
  const int64_t rows = 5, d = 4096;
  HostTensor in = kiln::testing::RandomTensor(dtype, static_cast<size_t>(rows * 2 * d), rng, -5.f, 5.f);
  DeviceBuffer din(in.bytes.size()), dout(static_cast<size_t>(rows * d) * 2);
  din.Upload(in.bytes);
  int64_t in_shape[2] = {rows, 2 * d}, out_shape[2] = {rows, d};
  DLTensor tin{}, tout{};
  tin.data = din.data();
  tin.device = {kDLCUDA, 0};
  tin.ndim = 2;
  tin.dtype = {kDLBfloat, 16, 1};
  tin.shape = in_shape;
  tout = tin;
  tout.data = dout.data();
  tout.shape = out_shape;
  using CFunction = kiln_status (*)(DLTensor*, const DLTensor*, void*);
  const std::pair<Act, CFunction> ops[] = {
      {Act::kSilu, kiln_silu_and_mul}, {Act::kGelu, kiln_gelu_and_mul}, {Act::kGeluTanh, kiln_gelu_tanh_and_mul}};
  for (const auto& [act, call] : ops) {
    dout.Poison();
    const kiln_status status = call(&tout, &tin, nullptr);
    INFO(kiln_last_error());
    REQUIRE(status == KILN_OK);
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
    const HostTensor out{dtype, dout.Download()};
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < d; ++i)
        bad += !kiln::testing::Close(out.Get(static_cast<size_t>(r * d + i)),
                                     ReferenceActAndMul(act, in.Get(static_cast<size_t>(r * 2 * d + i)),
                                                        in.Get(static_cast<size_t>(r * 2 * d + d + i))),
                                     kiln::testing::ToleranceFor(dtype));
    CHECK(bad == 0);
  }
}

TEST_CASE("unsupported activation dtypes and shapes are refused and launch nothing", "[gpu][client][ops][activation]") {
  GpuSession session;
  DeviceBuffer din(7 * 128 * 4), dout(7 * 64 * 4);
  dout.Poison();
  for (const OpCase& op : kOps) {
    INFO(op.name);
    auto fp32 = op.call(TensorView::Contiguous(dout.data(), DType::kFloat32, {7, 64}),
                        TensorView::Contiguous(din.data(), DType::kFloat32, {7, 128}), nullptr);
    CHECK(fp32.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(fp32.message().find("input: dtype fp32 is not supported; expected fp16 or bf16") != std::string::npos);
    auto odd = op.call(TensorView::Contiguous(dout.data(), DType::kBFloat16, {7, 63}),
                       TensorView::Contiguous(din.data(), DType::kBFloat16, {7, 127}), nullptr);
    CHECK(odd.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(odd.message().find("the last dim must be 2d, even") != std::string::npos);
    auto shape = op.call(TensorView::Contiguous(dout.data(), DType::kBFloat16, {7, 128}),
                         TensorView::Contiguous(din.data(), DType::kBFloat16, {7, 128}), nullptr);
    CHECK(shape.code() == kiln::StatusCode::kInvalidArgument);
    CHECK(shape.message().find("out: expected shape [7, 64]") != std::string::npos);

    // The daemon itself has no fp32 (or fp64) specialization and says which dtypes it has.
    auto daemon = kiln::Prefetch(kiln::OpRequest{op.name, {{"dtype", "fp32"}}}, session.gpu().arch);
    REQUIRE(!daemon.ok());
    CHECK(daemon.status().code() == kiln::StatusCode::kInvalidArgument);
    CHECK(daemon.status().message().find("'fp32' is not allowed; allowed: fp16, bf16") != std::string::npos);
  }
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  const std::vector<uint8_t> after = dout.Download();
  CHECK(after == std::vector<uint8_t>(after.size(), 0xFF));  // nothing was written
}

TEST_CASE("d is a launch argument: other d and rows reuse the loaded activation kernel",
          "[gpu][client][ops][activation][cache]") {
  GpuSession session;
  std::mt19937 rng(5);
  const DType dtype = DType::kFloat16;
  const int64_t max_rows = 64, max_d = 4096;
  HostTensor in = kiln::testing::RandomTensor(dtype, static_cast<size_t>(max_rows * 2 * max_d), rng);
  DeviceBuffer din(in.bytes.size()), dout(static_cast<size_t>(max_rows * max_d) * 2);
  din.Upload(in.bytes);
  auto call = [&](int64_t rows, int64_t d) {
    return kiln::ops::gelu_tanh_and_mul(TensorView::Contiguous(dout.data(), dtype, {rows, d}),
                                        TensorView::Contiguous(din.data(), dtype, {rows, 2 * d}));
  };
  REQUIRE(call(64, 4096).ok());  // loads gelu_tanh_and_mul_fp16 (vec 8), unless a test before did
  const auto s0 = kiln::GetClientStats();
  for (auto [rows, d] : {std::pair<int64_t, int64_t>{1, 8}, {33, 1024}, {64, 2048}, {7, 4096}})
    REQUIRE(call(rows, d).ok());
  const auto s1 = kiln::GetClientStats();
  CHECK(kiln::testing::KernelFetches(s1) == kiln::testing::KernelFetches(s0));
  CHECK(s1.modules_loaded == s0.modules_loaded);
  CHECK(s1.op_fast_hits == s0.op_fast_hits + 4);
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
}

}  // namespace
