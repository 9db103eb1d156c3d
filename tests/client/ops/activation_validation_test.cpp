// kiln::ops::silu_and_mul / gelu_and_mul / gelu_tanh_and_mul and their C ABI refuse every bad
// argument before touching the driver, with a message naming the argument, what was expected
// and what was found; accepted layouts plan the vector width the kernel will use. These run
// without a GPU: the pointers are fake and never dereferenced.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "client/ops/activation/activation_plan.h"
#include "kiln/ops/activation.h"
#include "tests/support/gpu_capability.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;
using kiln::client::ActivationOp;
using kiln::client::PlanActAndMul;

constexpr uintptr_t kIn = 0x7f0000000000;  // 256-byte aligned fake device addresses
constexpr uintptr_t kOut = kIn + (uintptr_t{1} << 32);

void* At(uintptr_t address) { return reinterpret_cast<void*>(address); }

TensorView Input(DType dtype, int64_t rows, int64_t d, uintptr_t address = kIn, Device device = Device::CUDA(0)) {
  return TensorView::Contiguous(At(address), dtype, {rows, 2 * d}, device);
}
TensorView Output(DType dtype, int64_t rows, int64_t d, uintptr_t address = kOut, Device device = Device::CUDA(0)) {
  return TensorView::Contiguous(At(address), dtype, {rows, d}, device);
}

struct Op {
  const char* api;
  std::function<kiln::Status(const TensorView&, const TensorView&)> call;
};
const Op kOps[] = {
    {"kiln::ops::silu_and_mul", [](const TensorView& o, const TensorView& i) { return kiln::ops::silu_and_mul(o, i); }},
    {"kiln::ops::gelu_and_mul", [](const TensorView& o, const TensorView& i) { return kiln::ops::gelu_and_mul(o, i); }},
    {"kiln::ops::gelu_tanh_and_mul",
     [](const TensorView& o, const TensorView& i) { return kiln::ops::gelu_tanh_and_mul(o, i); }},
};

// Every op refuses (out, input) with INVALID_ARGUMENT "<api>: <fragment>...".
void RequireInvalid(const TensorView& out, const TensorView& input, const std::string& fragment) {
  for (const Op& op : kOps) {
    const kiln::Status status = op.call(out, input);
    INFO(status.ToString());
    REQUIRE(status.code() == StatusCode::kInvalidArgument);
    CHECK(status.message().rfind(std::string(op.api) + ": ", 0) == 0);
    CHECK(status.message().find(fragment) != std::string::npos);
  }
}

TEST_CASE("activation ops refuse dtypes other than fp16 and bf16 and mixed dtypes",
          "[client][ops][validation][activation]") {
  RequireInvalid(Output(DType::kFloat32, 7, 4096), Input(DType::kFloat32, 7, 4096),
                 "input: dtype fp32 is not supported; expected fp16 or bf16");
  RequireInvalid(Output(DType::kInt32, 7, 4096), Input(DType::kInt32, 7, 4096),
                 "input: dtype int32 is not supported; expected fp16 or bf16");
  RequireInvalid(Output(DType::kFloat16, 7, 4096), Input(DType::kBFloat16, 7, 4096),
                 "out: expected dtype bf16 (input's), found fp16");
  RequireInvalid(Output(DType::kFloat32, 7, 4096), Input(DType::kFloat16, 7, 4096),
                 "out: expected dtype fp16 (input's), found fp32");
}

TEST_CASE("activation ops refuse a last dim that is not 2d and an out that is not input's shape with d",
          "[client][ops][validation][activation]") {
  auto odd = TensorView::Contiguous(At(kIn), DType::kBFloat16, {7, 4095});
  RequireInvalid(Output(DType::kBFloat16, 7, 2047), odd,
                 "input: the last dim must be 2d, even and at least 2 (x = the first d columns, y = the last "
                 "d), found 4095 in shape [7, 4095]");
  auto one = TensorView::Contiguous(At(kIn), DType::kBFloat16, {7, 1});
  RequireInvalid(Output(DType::kBFloat16, 7, 1), one, "found 1 in shape [7, 1]");
  auto zero = TensorView::Contiguous(At(kIn), DType::kBFloat16, {7, 0});
  RequireInvalid(TensorView::Contiguous(At(kOut), DType::kBFloat16, {7, 0}), zero, "found 0 in shape [7, 0]");
  auto huge = TensorView::Contiguous(At(kIn), DType::kFloat16, {1, (int64_t{1} << 31) + 2});
  RequireInvalid(Output(DType::kFloat16, 1, (int64_t{1} << 30) + 1), huge,
                 "input: d (half the last dim) must be at most 1073741824, found 1073741825");

  RequireInvalid(Output(DType::kBFloat16, 7, 8192), Input(DType::kBFloat16, 7, 4096),
                 "out: expected shape [7, 4096] (input's leading dims, last dim d = half of input's), found "
                 "[7, 8192]");
  RequireInvalid(Output(DType::kBFloat16, 8, 4096), Input(DType::kBFloat16, 7, 4096), "out: expected shape [7, 4096]");
  RequireInvalid(TensorView::Contiguous(At(kOut), DType::kBFloat16, {7 * 4096}), Input(DType::kBFloat16, 7, 4096),
                 "out: expected shape [7, 4096] (input's leading dims, last dim d = half of input's), found "
                 "[28672]");
  // Same rows, other leading dims: the shapes must match dim by dim.
  auto in3 = TensorView::Contiguous(At(kIn), DType::kFloat16, {2, 3, 128});
  RequireInvalid(TensorView::Contiguous(At(kOut), DType::kFloat16, {6, 64}), in3, "out: expected shape [2, 3, 64]");
  TensorView scalar = TensorView::Contiguous(At(kIn), DType::kBFloat16, {});
  RequireInvalid(scalar, scalar, "input: expected a tensor of rank 1 to 8");
}

TEST_CASE("activation ops refuse layouts the kernel cannot read or write", "[client][ops][validation][activation]") {
  SECTION("a last dim that is not contiguous") {
    auto in = TensorView::Strided(At(kIn), DType::kBFloat16, {7, 128}, {256, 2});
    RequireInvalid(Output(DType::kBFloat16, 7, 64), in,
                   "input: the last dim must be contiguous (stride 1), found stride 2");
    auto out = TensorView::Strided(At(kOut), DType::kBFloat16, {7, 64}, {128, 2});
    RequireInvalid(out, Input(DType::kBFloat16, 7, 64), "out: the last dim must be contiguous");
  }
  SECTION("leading dims that do not flatten into rows") {
    auto in = TensorView::Strided(At(kIn), DType::kFloat16, {4, 8, 128}, {2048, 128, 1});
    RequireInvalid(TensorView::Contiguous(At(kOut), DType::kFloat16, {4, 8, 64}), in,
                   "input: leading dims [4, 8, 128] with strides [2048, 128, 1] cannot be flattened");
  }
  SECTION("out rows that overlap each other") {
    auto out = TensorView::Strided(At(kOut), DType::kBFloat16, {7, 64}, {32, 1});
    RequireInvalid(out, Input(DType::kBFloat16, 7, 64),
                   "out: its rows overlap (row stride 32 < d 64); the op writes out, so its row stride must be "
                   "at least d");
  }
  SECTION("out overlapping input, in place included") {
    // out as the first half of input's rows (same pointer, input's row stride): refused, the
    // kernel reads input through the read-only cache while it writes out.
    auto first_half = TensorView::Strided(At(kIn), DType::kBFloat16, {7, 64}, {128, 1});
    RequireInvalid(first_half, Input(DType::kBFloat16, 7, 64), "out and input overlap in memory");
    RequireInvalid(Output(DType::kBFloat16, 7, 64, kIn + 256), Input(DType::kBFloat16, 7, 64),
                   "out and input overlap in memory");
  }
  SECTION("NULL and misaligned pointers") {
    RequireInvalid(Output(DType::kBFloat16, 7, 64), Input(DType::kBFloat16, 7, 64, 0),
                   "input: data is NULL, but the tensor [7, 128] is not empty");
    RequireInvalid(Output(DType::kBFloat16, 7, 64, kOut + 1), Input(DType::kBFloat16, 7, 64),
                   "out: data pointer 0x7f0100000001 is not aligned to 2 bytes");
  }
  SECTION("tensors off the GPU or on two GPUs") {
    RequireInvalid(Output(DType::kBFloat16, 7, 64), Input(DType::kBFloat16, 7, 64, kIn, Device::CPU()),
                   "input: expected a CUDA device tensor, found one on cpu");
    RequireInvalid(Output(DType::kBFloat16, 7, 64, kOut, Device::CUDA(1)), Input(DType::kBFloat16, 7, 64),
                   "out: on cuda:1, but input is on cuda:0; all tensors must be on one device");
  }
}

TEST_CASE("activation ops take no rows as OK without a launch after validating", "[client][ops][activation]") {
  // No driver call and no daemon request (none runs here).
  auto in = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 8192});
  auto out = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 4096});
  auto in3 = TensorView::Contiguous(nullptr, DType::kFloat16, {4, 0, 6});
  auto out3 = TensorView::Contiguous(nullptr, DType::kFloat16, {4, 0, 3});
  for (const Op& op : kOps) {
    INFO(op.api);
    CHECK(op.call(out, in).ok());
    CHECK(op.call(out3, in3).ok());
  }
  RequireInvalid(TensorView::Contiguous(nullptr, DType::kFloat16, {0, 4096}), in, "out: expected dtype bf16");
  RequireInvalid(TensorView::Contiguous(nullptr, DType::kFloat32, {0, 4096}),
                 TensorView::Contiguous(nullptr, DType::kFloat32, {0, 8192}), "input: dtype fp32 is not supported");
}

TEST_CASE("accepted activation layouts plan the widest vector every access allows",
          "[client][ops][validation][activation]") {
  auto plan = [](const TensorView& out, const TensorView& in) {
    auto p = PlanActAndMul(ActivationOp::kSiluAndMul, out, in, "test");
    INFO(p.status().ToString());
    REQUIRE(p.ok());
    return *p;
  };
  SECTION("dense, 16-byte aligned: vec 8") {
    auto p = plan(Output(DType::kBFloat16, 7, 14336), Input(DType::kBFloat16, 7, 14336));
    CHECK(p.rows == 7);
    CHECK(p.d == 14336);
    CHECK(p.vec == 8);
    CHECK(p.in_stride == 28672);
    CHECK(p.out_stride == 14336);
    CHECK(p.input == At(kIn));
    CHECK(p.out == At(kOut));
    CHECK(p.dtype == DType::kBFloat16);
  }
  SECTION("d decides: odd d is scalar, 4098 allows 2, 4100 allows 4") {
    CHECK(plan(Output(DType::kFloat16, 5, 1), Input(DType::kFloat16, 5, 1)).vec == 1);
    CHECK(plan(Output(DType::kFloat16, 5, 4095), Input(DType::kFloat16, 5, 4095)).vec == 1);
    CHECK(plan(Output(DType::kFloat16, 5, 4098), Input(DType::kFloat16, 5, 4098)).vec == 2);
    CHECK(plan(Output(DType::kFloat16, 5, 4100), Input(DType::kFloat16, 5, 4100)).vec == 4);
  }
  SECTION("strides and pointers decide too") {
    auto padded = TensorView::Strided(At(kIn), DType::kBFloat16, {7, 8192}, {8192 + 8, 1});
    CHECK(plan(Output(DType::kBFloat16, 7, 4096), padded).vec == 8);
    CHECK(plan(Output(DType::kBFloat16, 7, 4096), padded).in_stride == 8200);
    auto odd_stride = TensorView::Strided(At(kIn), DType::kBFloat16, {7, 8192}, {8192 + 1, 1});
    CHECK(plan(Output(DType::kBFloat16, 7, 4096), odd_stride).vec == 1);
    auto out_padded = TensorView::Strided(At(kOut), DType::kBFloat16, {7, 4096}, {4096 + 4, 1});
    CHECK(plan(out_padded, Input(DType::kBFloat16, 7, 4096)).vec == 4);
    CHECK(plan(Output(DType::kBFloat16, 7, 4096, kOut + 2), Input(DType::kBFloat16, 7, 4096)).vec == 1);
    CHECK(plan(Output(DType::kBFloat16, 7, 4096), Input(DType::kBFloat16, 7, 4096, kIn + 8)).vec == 4);
  }
  SECTION("leading dims flatten; one row; a strided single row") {
    auto in3 = TensorView::Contiguous(At(kIn), DType::kFloat16, {3, 5, 256});
    auto p = plan(TensorView::Contiguous(At(kOut), DType::kFloat16, {3, 5, 128}), in3);
    CHECK(p.rows == 15);
    CHECK(p.d == 128);
    auto row = plan(TensorView::Contiguous(At(kOut), DType::kFloat16, {64}),
                    TensorView::Contiguous(At(kIn), DType::kFloat16, {128}));
    CHECK(row.rows == 1);
    CHECK(row.vec == 8);
    // Broadcast input rows (row stride 0) are only read: fine.
    auto broadcast = TensorView::Strided(At(kIn), DType::kFloat16, {7, 128}, {0, 1});
    CHECK(plan(Output(DType::kFloat16, 7, 64), broadcast).in_stride == 0);
  }
  SECTION("out interleaved with input in one buffer, sharing no element") {
    // Rows of [x | y | out] in one [rows, 3d] buffer.
    auto in = TensorView::Strided(At(kIn), DType::kBFloat16, {7, 128}, {192, 1});
    auto out = TensorView::Strided(At(kIn + 128 * 2), DType::kBFloat16, {7, 64}, {192, 1});
    CHECK(plan(out, in).vec == 8);
  }
}

TEST_CASE("a valid activation call on a machine without a driver says so", "[client][ops][no-gpu][activation]") {
  if (kiln::testing::GpuUnavailableReason().empty()) {
    // On a GPU machine this call would launch on the fake pointers below.
    std::printf("SKIPPED: this test needs a machine without a usable GPU\n");
    std::exit(KILN_TEST_SKIP_CODE);
  }
  for (const Op& op : kOps) {
    auto status = op.call(Output(DType::kBFloat16, 7, 4096), Input(DType::kBFloat16, 7, 4096));
    INFO(status.ToString());
    CHECK(status.code() == StatusCode::kNoDriver);
    CHECK(status.message().rfind(std::string(op.api) + ": ", 0) == 0);
  }
}

// --- The C ABI ---

struct DLPair {
  int64_t in_shape[2] = {7, 8192};
  int64_t out_shape[2] = {7, 4096};
  DLTensor in{}, out{};
  explicit DLPair(DLDataType dtype = {kDLBfloat, 16, 1}) {
    in.data = At(kIn);
    in.device = {kDLCUDA, 0};
    in.ndim = 2;
    in.dtype = dtype;
    in.shape = in_shape;
    out = in;
    out.data = At(kOut);
    out.shape = out_shape;
  }
};

using CFunction = kiln_status (*)(DLTensor*, const DLTensor*, void*);
struct COp {
  const char* name;
  CFunction call;
};
const COp kCOps[] = {{"kiln_silu_and_mul", kiln_silu_and_mul},
                     {"kiln_gelu_and_mul", kiln_gelu_and_mul},
                     {"kiln_gelu_tanh_and_mul", kiln_gelu_tanh_and_mul}};

void RequireInvalidC(DLTensor* out, const DLTensor* in, const std::string& fragment) {
  for (const COp& op : kCOps) {
    const kiln_status status = op.call(out, in, nullptr);
    const std::string error = kiln_last_error();
    INFO(error);
    REQUIRE(status == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(error.rfind(std::string(op.name) + ": ", 0) == 0);
    CHECK(error.find(fragment) != std::string::npos);
  }
}

TEST_CASE("the activation C ABI checks DLTensors like the C++ API", "[client][capi][activation]") {
  DLPair t;
  RequireInvalidC(nullptr, &t.in, "out: the DLTensor pointer is NULL");
  RequireInvalidC(&t.out, nullptr, "input: the DLTensor pointer is NULL");
  DLPair fp32({kDLFloat, 32, 1});
  RequireInvalidC(&fp32.out, &fp32.in, "input: dtype fp32 is not supported; expected fp16 or bf16");
  DLPair fp64({kDLFloat, 64, 1});
  RequireInvalidC(&fp64.out, &fp64.in, "dtype code 2 (kDLFloat) with 64 bits is not supported");
  DLPair mixed;
  mixed.out.dtype = {kDLFloat, 16, 1};
  RequireInvalidC(&mixed.out, &mixed.in, "out: expected dtype bf16 (input's), found fp16");
  DLPair odd;
  odd.in_shape[1] = 8191;
  RequireInvalidC(&odd.out, &odd.in, "found 8191 in shape [7, 8191]");
  DLPair bad_out;
  bad_out.out_shape[1] = 8192;
  RequireInvalidC(&bad_out.out, &bad_out.in, "out: expected shape [7, 4096]");
  DLPair offset;
  offset.in.byte_offset = 1;
  RequireInvalidC(&offset.out, &offset.in, "input: data pointer 0x7f0000000001 is not aligned to 2 bytes");
  DLPair host;
  host.in.device = {kDLCPU, 0};
  RequireInvalidC(&host.out, &host.in, "input: expected a CUDA device tensor, found one on cpu");
  DLPair overlap;
  overlap.out.data = At(kIn);
  RequireInvalidC(&overlap.out, &overlap.in, "out and input overlap in memory");
}

TEST_CASE("an empty activation DLTensor is OK without a launch", "[client][capi][activation]") {
  DLPair empty;
  empty.in_shape[0] = 0;
  empty.out_shape[0] = 0;
  empty.in.data = nullptr;
  empty.out.data = nullptr;
  for (const COp& op : kCOps) {
    INFO(op.name);
    REQUIRE(op.call(nullptr, &empty.in, nullptr) == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(op.call(&empty.out, &empty.in, nullptr) == KILN_OK);
    CHECK(std::string(kiln_last_error()).empty());
  }
}

}  // namespace
