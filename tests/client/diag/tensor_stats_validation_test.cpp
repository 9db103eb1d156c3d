// kiln::client::diag::ComputeTensorStats refuses every tensor it cannot read before touching
// the driver, with a message naming what was wrong; an empty tensor is count 0 without a
// launch. These run without a GPU: the pointers are fake and never dereferenced. (The
// statistics themselves: tests/client/diag/gpu_tensor_stats_test.cpp.)
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "client/diag/tensor_stats.h"
#include "tests/support/gpu_capability.h"

namespace {

using kiln::Device;
using kiln::DeviceType;
using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;
using kiln::client::diag::ComputeTensorStats;

constexpr uintptr_t kData = 0x7f0000000000;  // a 256-byte aligned fake device address

void* At(uintptr_t address) { return reinterpret_cast<void*>(address); }

// ComputeTensorStats(t) is INVALID_ARGUMENT "kiln::client::diag::ComputeTensorStats: t: ..."
// holding `fragment`.
void RequireInvalid(const TensorView& t, const std::string& fragment) {
  auto stats = ComputeTensorStats(t, nullptr);
  REQUIRE(!stats.ok());
  INFO(stats.status().ToString());
  CHECK(stats.status().code() == StatusCode::kInvalidArgument);
  CHECK(stats.status().message().rfind("kiln::client::diag::ComputeTensorStats: t: ", 0) == 0);
  CHECK(stats.status().message().find(fragment) != std::string::npos);
}

TEST_CASE("tensor stats refuse tensors that are not on a CUDA device", "[client][diag][stats][validation]") {
  RequireInvalid(TensorView::Contiguous(At(kData), DType::kFloat32, {4}, Device::CPU()),
                 "expected a CUDA device tensor, found one on cpu");
  RequireInvalid(TensorView::Contiguous(At(kData), DType::kFloat32, {4}, {DeviceType::kCUDAHost, 0}),
                 "found one on cuda_host:0");
  RequireInvalid(TensorView::Contiguous(At(kData), DType::kBFloat16, {4}, {DeviceType::kCUDAManaged, 1}),
                 "found one on cuda_managed:1");
  // Even an empty one: the refusal does not depend on the size.
  RequireInvalid(TensorView::Contiguous(nullptr, DType::kFloat32, {0}, Device::CPU()), "found one on cpu");
  RequireInvalid(TensorView::Contiguous(At(kData), DType::kFloat32, {4}, Device::CUDA(-1)),
                 "device ordinal -1 is negative");
}

TEST_CASE("tensor stats refuse a rank out of range, with why TensorView gives -1",
          "[client][diag][stats][validation]") {
  RequireInvalid(TensorView::Contiguous(At(kData), DType::kFloat32, {1, 2, 3, 4, 5, 6, 7, 8, 9}),
                 "found rank -1 (TensorView::Contiguous and ::Strided give -1 for more than 8 dims");
  RequireInvalid(TensorView::Strided(At(kData), DType::kFloat32, {4, 4}, {4}), "found rank -1");
  TensorView nine = TensorView::Contiguous(At(kData), DType::kFloat32, {4});
  nine.ndim = 9;
  RequireInvalid(nine, "expected a tensor of rank 0 to 8, found rank 9");
}

TEST_CASE("tensor stats refuse null or misaligned data, negative sizes and unknown dtypes",
          "[client][diag][stats][validation]") {
  RequireInvalid(TensorView::Contiguous(nullptr, DType::kFloat16, {3, 5}),
                 "data is null, but the tensor has 15 elements");
  RequireInvalid(TensorView::Contiguous(nullptr, DType::kInt8, {}), "data is null, but the tensor has 1 elements");
  RequireInvalid(TensorView::Contiguous(At(kData + 2), DType::kFloat32, {8}),
                 "data 0x7f0000000002 is not aligned to the element size (4 bytes of fp32)");
  RequireInvalid(TensorView::Contiguous(At(kData + 4), DType::kInt64, {8}), "(8 bytes of int64)");
  RequireInvalid(TensorView::Contiguous(At(kData + 1), DType::kBFloat16, {8}), "(2 bytes of bf16)");
  RequireInvalid(TensorView::Strided(At(kData), DType::kFloat32, {4, -2}, {1, 1}), "dim 1 has negative size -2");
  TensorView odd = TensorView::Contiguous(At(kData), DType::kFloat32, {4});
  odd.dtype = static_cast<DType>(42);
  RequireInvalid(odd, "unknown dtype (kiln::DType value 42)");
}

TEST_CASE("tensor stats refuse sizes and strides that would overflow the kernel's offsets",
          "[client][diag][stats][validation]") {
  const int64_t big = int64_t{1} << 31;
  RequireInvalid(TensorView::Contiguous(At(kData), DType::kUInt8, {big, big, 2}), "more than 2^62 elements");
  RequireInvalid(TensorView::Contiguous(At(kData), DType::kUInt8, {big, big, big, big}), "more than 2^62 elements");
  RequireInvalid(TensorView::Strided(At(kData), DType::kFloat32, {2, 3}, {int64_t{1} << 59, 1}),
                 "the strides span more than 2^60 bytes");
  RequireInvalid(TensorView::Strided(At(kData), DType::kInt8, {3}, {INT64_MIN}),
                 "the strides span more than 2^60 bytes");
  RequireInvalid(TensorView::Strided(At(kData), DType::kInt8, {3, 3}, {INT64_MAX, INT64_MAX}),
                 "the strides span more than 2^60 bytes");
}

TEST_CASE("tensor stats of an empty tensor are count 0 without a launch", "[client][diag][stats]") {
  // No driver call (none exists here), and a null pointer is fine with no elements.
  for (const TensorView& t : {TensorView::Contiguous(nullptr, DType::kFloat32, {0}),
                              TensorView::Contiguous(nullptr, DType::kBFloat16, {4, 0, 7}),
                              TensorView::Strided(At(kData + 1), DType::kInt64, {0, 3}, {-5, 1000})}) {
    auto stats = ComputeTensorStats(t, nullptr);
    INFO(t.Describe() << ": " << stats.status().ToString());
    REQUIRE(stats.ok());
    CHECK(stats->count == 0);
    CHECK(stats->nan_count == 0);
    CHECK(stats->inf_count == 0);
    CHECK(stats->finite_count == 0);
    CHECK(stats->min == 0);
    CHECK(stats->max == 0);
    CHECK(stats->mean == 0);
  }
}

TEST_CASE("tensor stats of a valid tensor on a machine without a driver say so", "[client][diag][stats][no-gpu]") {
  if (kiln::testing::GpuUnavailableReason().empty()) {
    // On a GPU machine this call would launch on the fake pointer below.
    std::printf("SKIPPED: this test needs a machine without a usable GPU\n");
    std::exit(KILN_TEST_SKIP_CODE);
  }
  // Layouts the normalization accepts: dense, transposed, flipped, broadcast, 0-d.
  for (const TensorView& t : {TensorView::Contiguous(At(kData), DType::kBFloat16, {7, 4096}),
                              TensorView::Strided(At(kData), DType::kFloat32, {64, 32}, {1, 64}),
                              TensorView::Strided(At(kData + 400), DType::kFloat32, {100}, {-1}),
                              TensorView::Strided(At(kData), DType::kInt8, {1000, 16}, {0, 1}),
                              TensorView::Contiguous(At(kData), DType::kInt64, {})}) {
    auto stats = ComputeTensorStats(t, nullptr);
    INFO(t.Describe() << ": " << stats.status().ToString());
    REQUIRE(!stats.ok());
    CHECK(stats.status().code() == StatusCode::kNoDriver);
    CHECK(stats.status().message().rfind("kiln::client::diag::ComputeTensorStats: ", 0) == 0);
  }
}

}  // namespace
