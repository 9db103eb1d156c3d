// [gpu] kiln::ops::rms_norm and fused_add_rms_norm on a real GPU against a float64 CPU
// reference: fp32/fp16/bf16, rows 1/7/1000, hidden 1/3/4095/4096/5120/8192 and 4098 (which
// allows no vector wider than 2 elements), strided rows, in place, misaligned pointers; fresh
// random data, outputs poisoned with NaN before each launch, padding checked untouched.
// Tolerances (abs and rel): fp32 1e-5, fp16 2e-3, bf16 1.6e-2 (see gpu_harness.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "client/core/driver/current_context.h"
#include "client/core/loader/launch_cache.h"
#include "client/ops/norm/norm_plan.h"
#include "kiln/client.h"
#include "kiln/ops/norm.h"
#include "tests/support/gpu_harness.h"

namespace {

using kiln::DType;
using kiln::TensorView;
using kiln::testing::DeviceBuffer;
using kiln::testing::GpuSession;
using kiln::testing::HostTensor;

constexpr double kEps = 1e-6;
const DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
const int64_t kRows[] = {1, 7, 1000};
const int64_t kHidden[] = {1, 3, 4095, 4096, 5120, 8192, 4098};

struct Layout {
  int64_t a_pad = 0;      // extra elements after each row of out (rms_norm) / input (fused)
  int64_t b_pad = 0;      // ... of input (rms_norm) / residual (fused)
  int64_t offset = 0;     // elements every pointer is moved by (misaligns vectors)
  bool in_place = false;  // rms_norm: out is input
};

std::string Describe(DType d, int64_t rows, int64_t hidden, const Layout& l) {
  return std::string(kiln::DTypeName(d)) + " rows=" + std::to_string(rows) + " hidden=" + std::to_string(hidden) +
         " pads=" + std::to_string(l.a_pad) + "/" + std::to_string(l.b_pad) + " offset=" + std::to_string(l.offset) +
         (l.in_place ? " in-place" : "");
}

std::vector<double> ReferenceRow(const std::vector<double>& x, const HostTensor& w, int64_t offset) {
  double sum = 0;
  for (double v : x) sum += v * v;
  const double inv = 1.0 / std::sqrt(sum / static_cast<double>(x.size()) + kEps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w.Get(static_cast<size_t>(offset) + i);
  return y;
}

// Every element outside the rows must still hold `before` (poison, or the original data).
void CheckPadding(const HostTensor& after, const std::vector<uint8_t>& before, int64_t rows, int64_t hidden,
                  int64_t stride, int64_t offset, const char* what) {
  const size_t es = kiln::DTypeSize(after.dtype);
  int64_t touched = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    const int64_t e = static_cast<int64_t>(i) - offset;
    const bool in_rows = e >= 0 && e / stride < rows && e % stride < hidden;
    if (!in_rows && std::memcmp(after.bytes.data() + i * es, before.data() + i * es, es) != 0) ++touched;
  }
  INFO(what << ": elements outside the rows were written");
  CHECK(touched == 0);
}

void RunRmsNorm(DType dtype, int64_t rows, int64_t hidden, const Layout& l, std::mt19937& rng, CUstream stream) {
  INFO(Describe(dtype, rows, hidden, l));
  const size_t es = kiln::DTypeSize(dtype);
  const int64_t in_stride = hidden + l.b_pad;
  const int64_t out_stride = l.in_place ? in_stride : hidden + l.a_pad;
  const size_t in_count = static_cast<size_t>(rows * in_stride + l.offset);
  const size_t out_count = static_cast<size_t>(rows * out_stride + l.offset);

  HostTensor in = kiln::testing::RandomTensor(dtype, in_count, rng);
  HostTensor w = kiln::testing::RandomTensor(dtype, static_cast<size_t>(hidden + l.offset), rng);
  DeviceBuffer din(in.bytes.size()), dw(w.bytes.size());
  std::unique_ptr<DeviceBuffer> dout;
  din.Upload(in.bytes);
  dw.Upload(w.bytes);
  if (!l.in_place) {
    dout = std::make_unique<DeviceBuffer>(out_count * es);
    dout->Poison();
  }
  char* in_ptr = din.data() + l.offset * es;
  char* out_ptr = l.in_place ? in_ptr : dout->data() + l.offset * es;
  auto tin = TensorView::Strided(in_ptr, dtype, {rows, hidden}, {in_stride, 1});
  auto tout = TensorView::Strided(out_ptr, dtype, {rows, hidden}, {out_stride, 1});
  auto tw = TensorView::Contiguous(dw.data() + l.offset * es, dtype, {hidden});

  kiln::Status status = kiln::ops::rms_norm(tout, tin, tw, kEps, stream);
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuStreamSynchronize(stream));

  HostTensor out{dtype, l.in_place ? din.Download() : dout->Download()};
  const auto tol = kiln::testing::ToleranceFor(dtype);
  int64_t bad = 0;
  std::string first_bad;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> x(static_cast<size_t>(hidden));
    for (int64_t i = 0; i < hidden; ++i) x[i] = in.Get(static_cast<size_t>(l.offset + r * in_stride + i));
    const auto want = ReferenceRow(x, w, l.offset);
    for (int64_t i = 0; i < hidden; ++i) {
      const double got = out.Get(static_cast<size_t>(l.offset + r * out_stride + i));
      if (!kiln::testing::Close(got, want[i], tol) && bad++ == 0)
        first_bad = "row " + std::to_string(r) + " col " + std::to_string(i) + ": got " + std::to_string(got) +
                    ", want " + std::to_string(want[i]);
    }
  }
  INFO("first mismatch: " << first_bad);
  CHECK(bad == 0);
  CheckPadding(out, l.in_place ? in.bytes : std::vector<uint8_t>(out.bytes.size(), 0xFF), rows, hidden, out_stride,
               l.offset, "out");
}

void RunFusedAddRmsNorm(DType dtype, int64_t rows, int64_t hidden, const Layout& l, std::mt19937& rng,
                        CUstream stream) {
  INFO("fused_add " << Describe(dtype, rows, hidden, l));
  const size_t es = kiln::DTypeSize(dtype);
  const int64_t in_stride = hidden + l.a_pad;
  const int64_t res_stride = hidden + l.b_pad;
  HostTensor in = kiln::testing::RandomTensor(dtype, static_cast<size_t>(rows * in_stride + l.offset), rng);
  HostTensor res = kiln::testing::RandomTensor(dtype, static_cast<size_t>(rows * res_stride + l.offset), rng);
  HostTensor w = kiln::testing::RandomTensor(dtype, static_cast<size_t>(hidden + l.offset), rng);
  DeviceBuffer din(in.bytes.size()), dres(res.bytes.size()), dw(w.bytes.size());
  din.Upload(in.bytes);
  dres.Upload(res.bytes);
  dw.Upload(w.bytes);
  auto tin = TensorView::Strided(din.data() + l.offset * es, dtype, {rows, hidden}, {in_stride, 1});
  auto tres = TensorView::Strided(dres.data() + l.offset * es, dtype, {rows, hidden}, {res_stride, 1});
  auto tw = TensorView::Contiguous(dw.data() + l.offset * es, dtype, {hidden});

  kiln::Status status = kiln::ops::fused_add_rms_norm(tin, tres, tw, kEps, stream);
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuStreamSynchronize(stream));

  HostTensor got_in{dtype, din.Download()};
  HostTensor got_res{dtype, dres.Download()};
  HostTensor sum = kiln::testing::MakeHostTensor(dtype, static_cast<size_t>(hidden));
  const auto tol = kiln::testing::ToleranceFor(dtype);
  int64_t bad_res = 0, bad_out = 0;
  std::string first_bad;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> x(static_cast<size_t>(hidden));
    for (int64_t i = 0; i < hidden; ++i) {
      // As the kernel: the sum in fp32, rounded to the dtype; that is the new residual, exactly.
      const float a = in.Get(static_cast<size_t>(l.offset + r * in_stride + i));
      const float b = res.Get(static_cast<size_t>(l.offset + r * res_stride + i));
      sum.Set(static_cast<size_t>(i), a + b);
      x[i] = sum.Get(static_cast<size_t>(i));
      if (got_res.Get(static_cast<size_t>(l.offset + r * res_stride + i)) != static_cast<float>(x[i])) ++bad_res;
    }
    const auto want = ReferenceRow(x, w, l.offset);
    for (int64_t i = 0; i < hidden; ++i) {
      const double got = got_in.Get(static_cast<size_t>(l.offset + r * in_stride + i));
      if (!kiln::testing::Close(got, want[i], tol) && bad_out++ == 0)
        first_bad = "row " + std::to_string(r) + " col " + std::to_string(i) + ": got " + std::to_string(got) +
                    ", want " + std::to_string(want[i]);
    }
  }
  INFO("first mismatch of input: " << first_bad);
  CHECK(bad_res == 0);
  CHECK(bad_out == 0);
  CheckPadding(got_in, in.bytes, rows, hidden, in_stride, l.offset, "input");
  CheckPadding(got_res, res.bytes, rows, hidden, res_stride, l.offset, "residual");
}

TEST_CASE("rms_norm matches a float64 reference over dtypes and shapes", "[gpu][client][ops]") {
  GpuSession session;
  std::mt19937 rng(20251129);
  for (DType dtype : kDTypes)
    for (int64_t rows : kRows)
      for (int64_t hidden : kHidden) RunRmsNorm(dtype, rows, hidden, {}, rng, nullptr);
}

TEST_CASE("fused_add_rms_norm matches a float64 reference over dtypes and shapes", "[gpu][client][ops]") {
  GpuSession session;
  std::mt19937 rng(11292025);
  for (DType dtype : kDTypes)
    for (int64_t rows : kRows)
      for (int64_t hidden : kHidden) RunFusedAddRmsNorm(dtype, rows, hidden, {}, rng, nullptr);
}

TEST_CASE("the ops handle strided rows, in-place output and misaligned pointers", "[gpu][client][ops]") {
  GpuSession session;
  std::mt19937 rng(7);
  CUstream stream = nullptr;
  KILN_CU(kiln::testing::Driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (DType dtype : kDTypes) {
    RunRmsNorm(dtype, 7, 4096, {.a_pad = 0, .b_pad = 8}, rng, stream);   // padded input rows, full vec
    RunRmsNorm(dtype, 7, 4096, {.a_pad = 24, .b_pad = 1}, rng, stream);  // odd row stride: vec 1
    RunRmsNorm(dtype, 1000, 5120, {.in_place = true}, rng, stream);      // out is input
    RunRmsNorm(dtype, 7, 4096, {.b_pad = 4, .in_place = true}, rng, stream);
    RunRmsNorm(dtype, 7, 4096, {.offset = 1}, rng, stream);  // pointers off by one element
    RunFusedAddRmsNorm(dtype, 7, 4096, {.a_pad = 8, .b_pad = 3}, rng, stream);
    RunFusedAddRmsNorm(dtype, 1000, 8192, {.offset = 2}, rng, stream);
  }
  KILN_CU(kiln::testing::Driver().cuStreamDestroy(stream));
}

TEST_CASE("a 3-D input flattens into rows", "[gpu][client][ops]") {
  GpuSession session;
  std::mt19937 rng(3);
  const DType dtype = DType::kBFloat16;
  const int64_t b = 3, s = 5, h = 2048;
  HostTensor in = kiln::testing::RandomTensor(dtype, static_cast<size_t>(b * s * h), rng);
  HostTensor w = kiln::testing::RandomTensor(dtype, static_cast<size_t>(h), rng);
  DeviceBuffer din(in.bytes.size()), dw(w.bytes.size()), dout(in.bytes.size());
  din.Upload(in.bytes);
  dw.Upload(w.bytes);
  dout.Poison();
  auto status = kiln::ops::rms_norm(TensorView::Contiguous(dout.data(), dtype, {b, s, h}),
                                    TensorView::Contiguous(din.data(), dtype, {b, s, h}),
                                    TensorView::Contiguous(dw.data(), dtype, {h}), kEps);
  INFO(status.ToString());
  REQUIRE(status.ok());
  KILN_CU(kiln::testing::Driver().cuCtxSynchronize());
  HostTensor out{dtype, dout.Download()};
  int64_t bad = 0;
  for (int64_t r = 0; r < b * s; ++r) {
    std::vector<double> x(static_cast<size_t>(h));
    for (int64_t i = 0; i < h; ++i) x[i] = in.Get(static_cast<size_t>(r * h + i));
    auto want = ReferenceRow(x, w, 0);
    for (int64_t i = 0; i < h; ++i)
      bad += !kiln::testing::Close(out.Get(static_cast<size_t>(r * h + i)), want[i],
                                   kiln::testing::ToleranceFor(dtype));
  }
  CHECK(bad == 0);
}

TEST_CASE("a repeat call reuses the loaded kernel: no RPC, a fast-path hit", "[gpu][client][ops][cache]") {
  GpuSession session;
  // A hidden size no other test uses, so the first call misses even when every [gpu] test
  // runs in one process.
  constexpr int64_t kHiddenOnlyHere = 6144;
  std::mt19937 rng(1);
  const DType dtype = DType::kBFloat16;
  HostTensor in = kiln::testing::RandomTensor(dtype, 64 * kHiddenOnlyHere, rng);
  HostTensor w = kiln::testing::RandomTensor(dtype, kHiddenOnlyHere, rng);
  DeviceBuffer din(in.bytes.size()), dw(w.bytes.size()), dout(in.bytes.size());
  din.Upload(in.bytes);
  dw.Upload(w.bytes);
  auto view = [&](DeviceBuffer& buf, int64_t rows) {
    return TensorView::Contiguous(buf.data(), dtype, {rows, kHiddenOnlyHere});
  };
  auto tw = TensorView::Contiguous(dw.data(), dtype, {kHiddenOnlyHere});

  const auto s0 = kiln::GetClientStats();
  auto first = kiln::ops::rms_norm(view(dout, 64), view(din, 64), tw, kEps);
  INFO(first.ToString());
  REQUIRE(first.ok());
  const auto s1 = kiln::GetClientStats();
  CHECK(kiln::testing::KernelFetches(s1) == kiln::testing::KernelFetches(s0) + 1);
  CHECK(s1.modules_loaded == s0.modules_loaded + 1);
  CHECK(s1.op_fast_misses == s0.op_fast_misses + 1);

  // Same dtype, hidden and vec, other rows: the loaded kernel serves it, with no RPC.
  for (int64_t rows : {64, 1, 33}) REQUIRE(kiln::ops::rms_norm(view(dout, rows), view(din, rows), tw, kEps).ok());
  const auto s2 = kiln::GetClientStats();
  CHECK(kiln::testing::KernelFetches(s2) == kiln::testing::KernelFetches(s1));
  CHECK(s2.modules_loaded == s1.modules_loaded);
  CHECK(s2.op_fast_hits == s1.op_fast_hits + 3);

  // A second context on the same device: a new function handle, but the module is reused.
  const auto& d = kiln::testing::Driver();
  CUcontext other = nullptr;
  CUdevice device = 0;
  KILN_CU(d.cuDeviceGet(&device, 0));
  KILN_CU(d.cuCtxCreate(&other, nullptr, 0, device));  // becomes current
  {
    DeviceBuffer din2(in.bytes.size()), dw2(w.bytes.size()), dout2(in.bytes.size());
    din2.Upload(in.bytes);
    dw2.Upload(w.bytes);
    auto status = kiln::ops::rms_norm(view(dout2, 64), view(din2, 64),
                                      TensorView::Contiguous(dw2.data(), dtype, {kHiddenOnlyHere}), kEps);
    INFO(status.ToString());
    REQUIRE(status.ok());
    KILN_CU(d.cuCtxSynchronize());
    const auto s3 = kiln::GetClientStats();
    CHECK(kiln::testing::KernelFetches(s3) == kiln::testing::KernelFetches(s2));
    CHECK(s3.modules_loaded == s2.modules_loaded);
    CHECK(s3.op_fast_misses == s2.op_fast_misses + 1);  // new context: resolved once
  }
  KILN_CU(d.cuCtxDestroy(other));
  KILN_CU(d.cuCtxSetCurrent(session.context()));

  // What a repeat call costs on the host, launch included (reported, not asserted: speed is
  // measured in bench/).
  KILN_CU(d.cuCtxSynchronize());
  std::vector<double> ns;
  for (int i = 0; i < 2000; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    kiln::ops::rms_norm(view(dout, 1), view(din, 1), tw, kEps);
    ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
    if (i % 256 == 255) KILN_CU(d.cuCtxSynchronize());
  }
  KILN_CU(d.cuCtxSynchronize());
  std::sort(ns.begin(), ns.end());
  WARN("kiln::ops::rms_norm repeat call, host time incl. cuLaunchKernelEx: median "
       << ns[ns.size() / 2] << " ns, p90 " << ns[ns.size() * 9 / 10] << " ns over " << ns.size());

  // Every one of those repeat calls found its launch in the launch cache: no resolve, no RPC.
  const auto before = kiln::GetClientStats();
  const int repeats = 1000;
  for (int i = 0; i < repeats; ++i) REQUIRE(kiln::ops::rms_norm(view(dout, 1), view(din, 1), tw, kEps).ok());
  KILN_CU(d.cuCtxSynchronize());
  const auto after = kiln::GetClientStats();
  CHECK(after.op_fast_hits == before.op_fast_hits + repeats);
  CHECK(after.op_fast_misses == before.op_fast_misses);
  CHECK(kiln::testing::KernelFetches(after) == kiln::testing::KernelFetches(before));
}

TEST_CASE("tensors on another device than the current context are refused", "[gpu][client][ops]") {
  GpuSession session;
  DeviceBuffer buf(4096 * 4);
  auto t = TensorView::Contiguous(buf.data(), DType::kFloat32, {1, 1024}, kiln::Device::CUDA(1));
  auto w = TensorView::Contiguous(buf.data() + 8192, DType::kFloat32, {1024}, kiln::Device::CUDA(1));
  auto status = kiln::ops::rms_norm(t, t, w, kEps);
  INFO(status.ToString());
  CHECK(status.code() == kiln::StatusCode::kInvalidArgument);
  CHECK(status.message().find("the tensors are on cuda:1, but the current CUDA context is on cuda:0") !=
        std::string::npos);
}

}  // namespace
