// kiln::ops::rms_norm / fused_add_rms_norm refuse every bad argument before touching the
// driver, with a message naming the argument, what was expected and what was found. These run
// without a GPU: the pointers are never dereferenced, because validation fails (or, for the
// accepted layouts, only the pure planning step runs).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "client/ops/norm/norm_plan.h"
#include "kiln/ops/norm.h"
#include "tests/support/gpu_capability.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;

constexpr uintptr_t kBase = 0x7f0000000000;  // 256-byte aligned fake device addresses

void* At(uintptr_t address) { return reinterpret_cast<void*>(address); }

TensorView Rows(DType dtype, int64_t rows, int64_t hidden, uintptr_t address = kBase, Device device = Device::CUDA(0)) {
  return TensorView::Contiguous(At(address), dtype, {rows, hidden}, device);
}
TensorView Weight(DType dtype, int64_t hidden, uintptr_t address = kBase + (1 << 28)) {
  return TensorView::Contiguous(At(address), dtype, {hidden});
}
constexpr uintptr_t kOut = kBase + (1 << 29);

void RequireInvalid(const kiln::Status& status, const std::string& fragment) {
  INFO(status.ToString());
  REQUIRE(status.code() == StatusCode::kInvalidArgument);
  CHECK(status.message().find(fragment) != std::string::npos);
}

kiln::Status Rms(const TensorView& out, const TensorView& in, const TensorView& w, double eps = 1e-6) {
  return kiln::ops::rms_norm(out, in, w, eps, nullptr);
}

TEST_CASE("rms_norm refuses mismatched dtypes", "[client][ops][validation]") {
  RequireInvalid(Rms(Rows(DType::kFloat16, 7, 4096, kOut), Rows(DType::kBFloat16, 7, 4096),
                     Weight(DType::kBFloat16, 4096)),
                 "kiln::ops::rms_norm: out: expected dtype bf16 (input's), found fp16");
  RequireInvalid(Rms(Rows(DType::kBFloat16, 7, 4096, kOut), Rows(DType::kBFloat16, 7, 4096),
                     Weight(DType::kFloat32, 4096)),
                 "weight: expected dtype bf16 (input's), found fp32");
  RequireInvalid(Rms(Rows(DType::kInt32, 7, 4096, kOut), Rows(DType::kInt32, 7, 4096), Weight(DType::kInt32, 4096)),
                 "input: dtype int32 is not supported; expected fp32, fp16 or bf16");
}

TEST_CASE("rms_norm refuses mismatched shapes and bad ranks", "[client][ops][validation]") {
  RequireInvalid(Rms(Rows(DType::kFloat32, 7, 4095, kOut), Rows(DType::kFloat32, 7, 4096),
                     Weight(DType::kFloat32, 4096)),
                 "out: expected shape [7, 4096] (input's), found [7, 4095]");
  RequireInvalid(Rms(Rows(DType::kFloat32, 7, 4096, kOut), Rows(DType::kFloat32, 7, 4096),
                     Weight(DType::kFloat32, 4095)),
                 "weight: expected shape [4096] (input's hidden size), found [4095]");
  RequireInvalid(Rms(Rows(DType::kFloat32, 7, 4096, kOut), Rows(DType::kFloat32, 7, 4096),
                     Rows(DType::kFloat32, 1, 4096, kBase + (1 << 28))),
                 "weight: expected a 1-D tensor [hidden] = [4096], found rank 2 [1, 4096]");
  TensorView scalar = TensorView::Contiguous(At(kBase), DType::kFloat32, {});
  RequireInvalid(Rms(scalar, scalar, Weight(DType::kFloat32, 1)),
                 "input: expected a tensor of rank 1 to 8 ([..., hidden]), found rank 0");
  TensorView nine = TensorView::Contiguous(At(kBase), DType::kFloat32, {1, 1, 1, 1, 1, 1, 1, 1, 4});
  RequireInvalid(Rms(nine, nine, Weight(DType::kFloat32, 4)), "found rank -1");
  TensorView negative = TensorView::Strided(At(kBase), DType::kFloat32, {-2, 8}, {8, 1});
  RequireInvalid(Rms(negative, negative, Weight(DType::kFloat32, 8)), "input: dim 0 has negative size -2");
}

TEST_CASE("rms_norm refuses a hidden size outside 1..65536", "[client][ops][validation]") {
  RequireInvalid(Rms(Rows(DType::kBFloat16, 2, 0, kOut), Rows(DType::kBFloat16, 2, 0), Weight(DType::kBFloat16, 0)),
                 "input: hidden size (the last dim) must be 1 to 65536, found 0");
  RequireInvalid(Rms(Rows(DType::kBFloat16, 2, 65537, kOut), Rows(DType::kBFloat16, 2, 65537),
                     Weight(DType::kBFloat16, 65537)),
                 "found 65537");
}

TEST_CASE("rms_norm refuses layouts the kernel cannot read", "[client][ops][validation]") {
  SECTION("a last dim that is not contiguous") {
    auto in = TensorView::Strided(At(kBase), DType::kBFloat16, {7, 4096}, {8192, 2});
    RequireInvalid(Rms(Rows(DType::kBFloat16, 7, 4096, kOut), in, Weight(DType::kBFloat16, 4096)),
                   "input: the last dim must be contiguous (stride 1), found stride 2 in "
                   "bf16[7, 4096] strides [8192, 2] cuda:0");
  }
  SECTION("leading dims that do not flatten into rows") {
    auto in = TensorView::Strided(At(kBase), DType::kFloat32, {4, 8, 64}, {1024, 64, 1});
    auto out = TensorView::Contiguous(At(kOut), DType::kFloat32, {4, 8, 64});
    RequireInvalid(Rms(out, in, Weight(DType::kFloat32, 64)),
                   "input: leading dims [4, 8, 64] with strides [1024, 64, 1] cannot be flattened "
                   "into rows: dim 0 has stride 1024, flattening needs 512");
  }
  SECTION("a negative stride") {
    auto in = TensorView::Strided(At(kBase), DType::kFloat32, {4, 64}, {-64, 1});
    RequireInvalid(Rms(Rows(DType::kFloat32, 4, 64, kOut), in, Weight(DType::kFloat32, 64)),
                   "input: dim 0 has negative stride -64");
  }
  SECTION("a written tensor whose rows overlap") {
    auto out = TensorView::Strided(At(kOut), DType::kFloat32, {4, 64}, {32, 1});
    RequireInvalid(Rms(out, Rows(DType::kFloat32, 4, 64), Weight(DType::kFloat32, 64)),
                   "out: its rows overlap (row stride 32 < hidden 64)");
  }
}

TEST_CASE("rms_norm refuses NULL and misaligned pointers", "[client][ops][validation]") {
  RequireInvalid(Rms(Rows(DType::kBFloat16, 7, 4096, kOut), Rows(DType::kBFloat16, 7, 4096, 0),
                     Weight(DType::kBFloat16, 4096)),
                 "input: data is NULL, but the tensor [7, 4096] is not empty");
  RequireInvalid(Rms(Rows(DType::kBFloat16, 7, 4096, kOut), Rows(DType::kBFloat16, 7, 4096),
                     Weight(DType::kBFloat16, 4096, 0)),
                 "weight: data is NULL");
  RequireInvalid(Rms(Rows(DType::kBFloat16, 7, 4096, kOut + 1), Rows(DType::kBFloat16, 7, 4096),
                     Weight(DType::kBFloat16, 4096)),
                 "out: data pointer 0x7f0020000001 is not aligned to 2 bytes (the size of one bf16 "
                 "element)");
  RequireInvalid(Rms(Rows(DType::kFloat32, 7, 4096, kOut), Rows(DType::kFloat32, 7, 4096, kBase + 2),
                     Weight(DType::kFloat32, 4096)),
                 "input: data pointer 0x7f0000000002 is not aligned to 4 bytes");
}

TEST_CASE("rms_norm refuses tensors off the GPU or on different GPUs", "[client][ops][validation]") {
  RequireInvalid(Rms(Rows(DType::kFloat32, 7, 64, kOut), Rows(DType::kFloat32, 7, 64, kBase, Device::CPU()),
                     Weight(DType::kFloat32, 64)),
                 "input: expected a CUDA device tensor, found one on cpu");
  RequireInvalid(Rms(Rows(DType::kFloat32, 7, 64, kOut, Device::CUDA(1)), Rows(DType::kFloat32, 7, 64),
                     Weight(DType::kFloat32, 64)),
                 "out: on cuda:1, but input is on cuda:0; all tensors must be on one device");
  auto managed = Rows(DType::kFloat32, 7, 64, kOut, {kiln::DeviceType::kCUDAManaged, 0});
  RequireInvalid(Rms(managed, Rows(DType::kFloat32, 7, 64), Weight(DType::kFloat32, 64)),
                 "out: expected a CUDA device tensor, found one on cuda_managed:0");
}

TEST_CASE("rms_norm refuses an eps that is not a positive finite float", "[client][ops][validation]") {
  auto out = Rows(DType::kFloat32, 7, 64, kOut);
  auto in = Rows(DType::kFloat32, 7, 64);
  auto w = Weight(DType::kFloat32, 64);
  RequireInvalid(Rms(out, in, w, 0.0), "eps: expected a finite value > 0, found 0");
  RequireInvalid(Rms(out, in, w, -1e-6), "eps: expected a finite value > 0, found -1e-06");
  RequireInvalid(Rms(out, in, w, std::nan("")), "found nan");
  RequireInvalid(Rms(out, in, w, std::numeric_limits<double>::infinity()), "found inf");
  RequireInvalid(Rms(out, in, w, 1e-50), "eps: 1e-50 is not a positive finite float");
  RequireInvalid(Rms(out, in, w, 1e300), "eps: 1e+300 is not a positive finite float");
}

TEST_CASE("rms_norm refuses out partially overlapping input or weight", "[client][ops][validation]") {
  // out one row past input: the rows overlap, but they are not the same rows.
  RequireInvalid(Rms(Rows(DType::kFloat32, 7, 64, kBase + 64 * 4), Rows(DType::kFloat32, 7, 64),
                     Weight(DType::kFloat32, 64)),
                 "out and input overlap in memory");
  RequireInvalid(Rms(Rows(DType::kFloat32, 7, 64, kOut), Rows(DType::kFloat32, 7, 64),
                     Weight(DType::kFloat32, 64, kOut + 128)),
                 "out and weight overlap in memory");
}

TEST_CASE("fused_add_rms_norm refuses bad residuals and overlaps", "[client][ops][validation]") {
  auto in = Rows(DType::kBFloat16, 7, 4096);
  auto w = Weight(DType::kBFloat16, 4096);
  auto residual = [](DType d, int64_t hidden) { return Rows(d, 7, hidden, kOut); };
  RequireInvalid(kiln::ops::fused_add_rms_norm(in, residual(DType::kFloat16, 4096), w, 1e-6),
                 "kiln::ops::fused_add_rms_norm: residual: expected dtype bf16 (input's), found fp16");
  RequireInvalid(kiln::ops::fused_add_rms_norm(in, residual(DType::kBFloat16, 2048), w, 1e-6),
                 "residual: expected shape [7, 4096] (input's), found [7, 2048]");
  RequireInvalid(kiln::ops::fused_add_rms_norm(in, in, w, 1e-6), "input and residual overlap in memory");
  RequireInvalid(kiln::ops::fused_add_rms_norm(in, residual(DType::kBFloat16, 4096), w, 0.0),
                 "eps: expected a finite value > 0");
}

TEST_CASE("an empty input is OK and launches nothing, with or without a GPU", "[client][ops]") {
  // No rows: nothing to compute, so no driver call and no daemon request (none runs here).
  auto empty = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 4096});
  auto empty3d = TensorView::Contiguous(nullptr, DType::kBFloat16, {4, 0, 4096});
  auto w = Weight(DType::kBFloat16, 4096);
  CHECK(kiln::ops::rms_norm(empty, empty, w, 1e-6).ok());
  CHECK(kiln::ops::rms_norm(empty3d, empty3d, w, 1e-6).ok());
  CHECK(
      kiln::ops::fused_add_rms_norm(empty, TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 4096}), w, 1e-6).ok());
  // Still validated: an empty tensor of the wrong dtype is refused.
  RequireInvalid(kiln::ops::rms_norm(TensorView::Contiguous(nullptr, DType::kFloat16, {0, 4096}), empty, w, 1e-6),
                 "out: expected dtype bf16");
}

TEST_CASE("layouts the kernel can take pass validation", "[client][ops][validation]") {
  using kiln::client::PlanRmsNorm;
  SECTION("in place: out is input") {
    auto in = Rows(DType::kBFloat16, 7, 4096);
    auto plan = PlanRmsNorm(in, in, Weight(DType::kBFloat16, 4096), 1e-6, "test");
    REQUIRE(plan.ok());
    CHECK(plan->a == plan->b);
  }
  SECTION("3-D input whose leading dims flatten, size-1 dims with any stride") {
    auto in = TensorView::Strided(At(kBase), DType::kFloat32, {4, 1, 8, 64}, {512, 12345, 64, 1});
    auto out = TensorView::Contiguous(At(kOut), DType::kFloat32, {4, 1, 8, 64});
    auto plan = PlanRmsNorm(out, in, Weight(DType::kFloat32, 64), 1e-6, "test");
    REQUIRE(plan.ok());
    CHECK(plan->rows == 32);
    CHECK(plan->hidden == 64);
    CHECK(plan->b_stride == 64);
  }
  SECTION("hidden 1 with any last-dim stride, and a 1-D input as one row") {
    auto in = TensorView::Strided(At(kBase), DType::kFloat32, {5, 1}, {3, 7});
    auto plan = PlanRmsNorm(Rows(DType::kFloat32, 5, 1, kOut), in, Weight(DType::kFloat32, 1), 1e-6, "t");
    REQUIRE(plan.ok());
    CHECK(plan->b_stride == 3);
    auto row = TensorView::Contiguous(At(kBase), DType::kFloat32, {64});
    auto one = PlanRmsNorm(TensorView::Contiguous(At(kOut), DType::kFloat32, {64}), row, Weight(DType::kFloat32, 64),
                           1e-6, "t");
    REQUIRE(one.ok());
    CHECK(one->rows == 1);
  }
  SECTION("out and input as interleaved halves of one [rows, 2*hidden] buffer") {
    auto in = TensorView::Strided(At(kBase), DType::kFloat16, {7, 64}, {128, 1});
    auto out = TensorView::Strided(At(kBase + 64 * 2), DType::kFloat16, {7, 64}, {128, 1});
    auto plan = PlanRmsNorm(out, in, Weight(DType::kFloat16, 64), 1e-6, "t");
    REQUIRE(plan.ok());
    CHECK(plan->a_stride == 128);
  }
  SECTION("a strided rows view: broadcast input rows (row stride 0) are read-only, so fine") {
    auto in = TensorView::Strided(At(kBase), DType::kFloat32, {7, 64}, {0, 1});
    auto plan = PlanRmsNorm(Rows(DType::kFloat32, 7, 64, kOut), in, Weight(DType::kFloat32, 64), 1e-6, "t");
    REQUIRE(plan.ok());
    CHECK(plan->b_stride == 0);
  }
  SECTION("eps is passed as a float") {
    auto plan = PlanRmsNorm(Rows(DType::kFloat32, 1, 8, kOut), Rows(DType::kFloat32, 1, 8), Weight(DType::kFloat32, 8),
                            1e-5, "t");
    REQUIRE(plan.ok());
    CHECK(plan->eps == 1e-5f);
  }
}

TEST_CASE("a valid call on a machine without a driver says so", "[client][ops][no-gpu]") {
  if (kiln::testing::GpuUnavailableReason().empty()) {
    // On a GPU machine this call would launch on the fake pointers below.
    std::printf("SKIPPED: this test needs a machine without a usable GPU\n");
    std::exit(KILN_TEST_SKIP_CODE);
  }
  auto status = Rms(Rows(DType::kBFloat16, 7, 4096, kOut), Rows(DType::kBFloat16, 7, 4096),
                    Weight(DType::kBFloat16, 4096));
  INFO(status.ToString());
  CHECK(status.code() == StatusCode::kNoDriver);
  CHECK(status.message().rfind("kiln::ops::rms_norm: ", 0) == 0);
}

}  // namespace
