// kiln::TensorView, dtypes, devices and kiln::Status: the value types of the public API.
#include <catch2/catch.hpp>

#include "kiln/kernel.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace {

TEST_CASE("TensorView::Contiguous computes row-major strides", "[client][tensor]") {
  auto t = kiln::TensorView::Contiguous(nullptr, kiln::DType::kBFloat16, {2, 3, 4});
  REQUIRE(t.ndim == 3);
  CHECK(t.strides[0] == 12);
  CHECK(t.strides[1] == 4);
  CHECK(t.strides[2] == 1);
  CHECK(t.numel() == 24);
  CHECK(t.device == kiln::Device::CUDA(0));
  CHECK(t.Describe() == "bf16[2, 3, 4] strides [12, 4, 1] cuda:0");
}

TEST_CASE("TensorView factories mark bad ranks instead of overflowing", "[client][tensor]") {
  auto too_many = kiln::TensorView::Contiguous(nullptr, kiln::DType::kFloat32, {1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(too_many.ndim == -1);
  auto mismatched = kiln::TensorView::Strided(nullptr, kiln::DType::kFloat32, {2, 3}, {3});
  CHECK(mismatched.ndim == -1);
  CHECK(kiln::TensorView::Contiguous(nullptr, kiln::DType::kFloat32, {0, 5}).numel() == 0);
}

TEST_CASE("dtype and device names are the ones op params and messages use", "[client][tensor]") {
  CHECK(std::string(kiln::DTypeName(kiln::DType::kFloat32)) == "fp32");
  CHECK(std::string(kiln::DTypeName(kiln::DType::kFloat16)) == "fp16");
  CHECK(std::string(kiln::DTypeName(kiln::DType::kBFloat16)) == "bf16");
  CHECK(kiln::DTypeSize(kiln::DType::kFloat32) == 4);
  CHECK(kiln::DTypeSize(kiln::DType::kBFloat16) == 2);
  CHECK(kiln::DTypeSize(kiln::DType::kInt64) == 8);
  CHECK(kiln::DeviceName(kiln::Device::CUDA(3)) == "cuda:3");
  CHECK(kiln::DeviceName(kiln::Device::CPU()) == "cpu");
  CHECK(std::string(kiln::OriginName(kiln::Origin::kCompiled)) == "compiled");
  CHECK(std::string(kiln::OriginName(kiln::Origin::kRepository)) == "repository");
  CHECK(std::string(kiln::OriginName(kiln::Origin::kRemote)) == "remote");
}

TEST_CASE("Status and StatusOr carry a code and a message", "[client][status]") {
  kiln::Status ok;
  CHECK(ok.ok());
  CHECK(ok.ToString() == "OK");
  kiln::Status bad(kiln::StatusCode::kInvalidArgument, "input: bad");
  CHECK(bad.ToString() == "INVALID_ARGUMENT: input: bad");
  CHECK(bad.WithContext("rms_norm").message() == "rms_norm: input: bad");
  CHECK(ok.WithContext("x").ok());

  kiln::StatusOr<int> value = 7;
  REQUIRE(value.ok());
  CHECK(*value == 7);
  kiln::StatusOr<int> error = bad;
  CHECK_FALSE(error.ok());
  CHECK(error.status() == bad);
  kiln::StatusOr<int> from_ok = kiln::OkStatus();  // a bug in the caller, reported as one
  CHECK(from_ok.status().code() == kiln::StatusCode::kInternal);
}

}  // namespace
