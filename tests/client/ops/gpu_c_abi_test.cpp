// [gpu] The C ABI on a real GPU: kiln_rms_norm and kiln_fused_add_rms_norm on DLTensors
// (byte_offset, explicit strides, NULL strides) against a float64 reference, per dtype.
#include <catch2/catch.hpp>

#include <cmath>

#include "kiln/kiln.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::testing::DeviceBuffer;
using kiln::testing::HostTensor;

DLDataType ToDL(DType d) {
  switch (d) {
    case DType::kFloat32: return {kDLFloat, 32, 1};
    case DType::kFloat16: return {kDLFloat, 16, 1};
    default: return {kDLBfloat, 16, 1};
  }
}

DLTensor View(DeviceBuffer& buf, DType d, int64_t* shape, int ndim, int64_t* strides, uint64_t byte_offset) {
  DLTensor t{};
  t.data = buf.data();
  t.device = {kDLCUDA, 0};
  t.ndim = ndim;
  t.dtype = ToDL(d);
  t.shape = shape;
  t.strides = strides;
  t.byte_offset = byte_offset;
  return t;
}

TEST_CASE("kiln_rms_norm and kiln_fused_add_rms_norm match a float64 reference", "[gpu][client][capi]") {
  kiln::testing::GpuSession session;
  std::mt19937 rng(42);
  const double eps = 1e-5;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    INFO(kiln::DTypeName(dtype));
    const int64_t rows = 9, hidden = 3072, stride = 3072 + 64, offset = 8;  // elements
    const size_t es = kiln::DTypeSize(dtype);
    const size_t count = static_cast<size_t>(offset + rows * stride);
    HostTensor in = kiln::testing::RandomTensor(dtype, count, rng);
    HostTensor res = kiln::testing::RandomTensor(dtype, count, rng);
    HostTensor w = kiln::testing::RandomTensor(dtype, static_cast<size_t>(hidden), rng);
    DeviceBuffer din(in.bytes.size()), dres(res.bytes.size()), dw(w.bytes.size()), dout(in.bytes.size());
    din.Upload(in.bytes);
    dres.Upload(res.bytes);
    dw.Upload(w.bytes);
    dout.Poison();

    int64_t shape[2] = {rows, hidden};
    int64_t strides[2] = {stride, 1};
    int64_t wshape[1] = {hidden};
    DLTensor tin = View(din, dtype, shape, 2, strides, offset * es);
    DLTensor tout = View(dout, dtype, shape, 2, strides, offset * es);
    DLTensor tw = View(dw, dtype, wshape, 1, nullptr, 0);
    REQUIRE(kiln_rms_norm(&tout, &tin, &tw, eps, nullptr) == KILN_OK);
    INFO(kiln_last_error());
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());

    DLTensor tres = View(dres, dtype, shape, 2, strides, offset * es);
    REQUIRE(kiln_fused_add_rms_norm(&tin, &tres, &tw, eps, nullptr) == KILN_OK);
    KILN_CU(kiln::testing::Driver().cuCtxSynchronize());

    HostTensor out{dtype, dout.Download()};
    HostTensor fused{dtype, din.Download()};
    HostTensor new_res{dtype, dres.Download()};
    HostTensor sum = kiln::testing::MakeHostTensor(dtype, 1);
    const auto tol = kiln::testing::ToleranceFor(dtype);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const size_t base = static_cast<size_t>(offset + r * stride);
      double ss = 0, ss_fused = 0;
      std::vector<double> x(static_cast<size_t>(hidden));
      for (int64_t i = 0; i < hidden; ++i) {
        ss += std::pow(in.Get(base + i), 2);
        sum.Set(0, in.Get(base + i) + res.Get(base + i));
        x[i] = sum.Get(0);
        ss_fused += x[i] * x[i];
        bad += new_res.Get(base + i) != static_cast<float>(x[i]);
      }
      const double inv = 1 / std::sqrt(ss / hidden + eps), inv_fused = 1 / std::sqrt(ss_fused / hidden + eps);
      for (int64_t i = 0; i < hidden; ++i) {
        bad += !kiln::testing::Close(out.Get(base + i), in.Get(base + i) * inv * w.Get(i), tol);
        bad += !kiln::testing::Close(fused.Get(base + i), x[i] * inv_fused * w.Get(i), tol);
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("the C ABI reports a context on another device", "[gpu][client][capi]") {
  kiln::testing::GpuSession session;
  DeviceBuffer buf(1 << 16);
  int64_t shape[2] = {4, 256};
  int64_t wshape[1] = {256};
  DLTensor t = View(buf, DType::kFloat32, shape, 2, nullptr, 0);
  DLTensor w = View(buf, DType::kFloat32, wshape, 1, nullptr, 8192);
  t.device.device_id = 1;
  w.device.device_id = 1;
  CHECK(kiln_rms_norm(&t, &t, &w, 1e-6, nullptr) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("the current CUDA context is on cuda:0") != std::string::npos);
}

}  // namespace
