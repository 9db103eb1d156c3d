// kiln_diag_child: a small program the call-diagnostics tests run as a real child process
// (fork + exec) with KILN_LOGLEVEL, KILN_LOGDEST and KILN_DUMP_* in its environment.
//
//   kiln_diag_child op-then-abort     rms_norm on valid shapes and aligned fake device pointers,
//                                     then abort(): the op gets as far as the driver (no GPU
//                                     there: the tests hide it) and the log must survive
//   kiln_diag_child op-then-exit      the same call, then a normal exit
//   kiln_diag_child invalid           an rms_norm that validation refuses
//   kiln_diag_child c-abi             kiln_rms_norm through the C ABI
//   kiln_diag_child all-ops TRACES    one call of every op of the op table, made from its trace
//                                     definition in TRACES (each stops at validation or at the
//                                     driver)
//   kiln_diag_child host-calls N OP...  N rounds of traced calls named OP on host tensors: the
//                                     real trace path (log, statistics gate, dumps, limits,
//                                     filters, the pause hook) around a body that reports its
//                                     "launch" as LaunchFunction does and computes on the host
//   kiln_diag_child gpu-ops           GPU 0, kilnd at KILN_SOCKET: seven real calls (activation,
//                                     rms_norm on a padded input, fused_add_rms_norm, apply_rope
//                                     in place, append_paged_kv, batch_decode, top_p_sampling) on
//                                     fixed random data; prints "expect #<call> <tensor> <before|
//                                     after> count=.. nan=.. inf=.. min=.. max=.. mean=.." from a
//                                     float64 host computation, for the statistics the log shows
//   kiln_diag_child gpu-capture       one rms_norm on a stream, then the same call captured into
//                                     a CUDA graph, the graph launched, its output checked
//
// Prints each call's status on stdout.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "client/core/api/float16.h"
#include "client/core/driver/cuda_driver.h"
#include "client/diag/call_trace.h"
#include "client/ops/op_table.h"
#include "kiln/comm.h"
#include "kiln/kiln.h"
#include "kiln/ops.h"
#include "tests/client/ops/trace_example_args.h"

namespace {

using kiln::DType;
using kiln::TensorView;

// Aligned addresses that are never dereferenced: every call stops before a launch.
char* Fake(int i) { return reinterpret_cast<char*>(uintptr_t{0x7f0000000000} + (static_cast<uintptr_t>(i) << 28)); }

void Print(const char* what, const kiln::Status& s) { std::printf("%s: %s\n", what, s.ToString().c_str()); }

kiln::Status RmsNorm() {
  auto in = TensorView::Contiguous(Fake(1), DType::kBFloat16, {7, 4096});
  auto out = TensorView::Contiguous(Fake(2), DType::kBFloat16, {7, 4096});
  auto w = TensorView::Contiguous(Fake(3), DType::kBFloat16, {4096});
  return kiln::ops::rms_norm(out, in, w, 1e-6);
}

// One call of every op of the op table through its invoker, with the arguments of its trace
// definition's first example (tests/client/ops/trace_example_args.h). Prints, per op,
// "<name>: called: <status>" when the call reached its call record (a traced call; its
// outcome follows), "<name>: not called: <status>" when its invoker refused the arguments
// before that, or "<name>: not invokable: <why>".
int AllOps(const std::string& traces_dir) {
  auto defs = kiln::traces::LoadTraceDefinitions(traces_dir);
  if (!defs.ok()) {
    std::fprintf(stderr, "kiln_diag_child: %s\n", defs.status().ToString().c_str());
    return 2;
  }
  std::string called;
  kiln::client::diag::SetCallObserver(
      [&](const kiln::client::diag::OpCall& call, const kiln::Status&) { called = call.op; });
  for (const kiln::client::OpDescriptor* op : kiln::client::AllOps()) {
    if (op->invoke == nullptr) {
      std::printf("%s: not invokable: %s\n", op->name, op->not_invokable);
      continue;
    }
    const kiln::traces::TraceDefinition* def = kiln::client::testing::FindTraceDefinition(*defs, op->op);
    if (def == nullptr || def->examples.empty()) {
      std::fprintf(stderr, "kiln_diag_child: op %s has no trace definition with an example\n", op->name);
      return 2;
    }
    kiln::client::testing::TraceExampleArgs args(*def);
    called.clear();
    const kiln::Status status = op->invoke(*op, args, nullptr);
    std::printf("%s: %s: %s\n", op->name, called == op->name ? "called" : "not called", status.ToString().c_str());
  }
  kiln::client::diag::SetCallObserver(nullptr);
  return 0;
}

// One host "op" of the trace path: out = 2 * input, over a strided input view.
kiln::Status HostCall(const std::string& op, int round) {
  static std::deque<std::vector<float>> keep;  // the tensors outlive the call (dumps read them)
  keep.emplace_back(3 * 8, -1.f);
  std::vector<float>& in_buffer = keep.back();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      in_buffer[static_cast<size_t>(i * 8 + j * 2)] = static_cast<float>(round * 100 + i * 10 + j);
  keep.emplace_back(12, 0.f);
  std::vector<float>& out_buffer = keep.back();
  static const uint16_t weight[4] = {0x3FC0, 0xC000, 0x3E80, 0x4040};  // bf16 1.5, -2, 0.25, 3
  static const int32_t index[3] = {7, -1, 42};
  const auto host = kiln::Device::CPU();
  auto input = TensorView::Strided(in_buffer.data(), DType::kFloat32, {3, 4}, {8, 2}, host);
  auto out = TensorView::Contiguous(out_buffer.data(), DType::kFloat32, {3, 4}, host);
  auto w = TensorView::Contiguous(const_cast<uint16_t*>(weight), DType::kBFloat16, {4}, host);
  auto idx = TensorView::Contiguous(const_cast<int32_t*>(index), DType::kInt32, {3}, host);
  auto body = [&]() -> kiln::Status {
    kiln::LaunchConfig config;
    config.grid.x = 3;
    config.block.x = 4;
    kiln::client::diag::BeforeLaunch(nullptr, "host_double", config);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j)
        out_buffer[static_cast<size_t>(i * 4 + j)] = 2 * in_buffer[static_cast<size_t>(i * 8 + j * 2)];
    return kiln::OkStatus();
  };
  const std::string api = "host::" + op;
  if (kiln::client::diag::Level() != 0)
    return kiln::client::diag::Traced(
        op.c_str(), api.c_str(), nullptr,
        [&](kiln::client::diag::OpCall& c) {
          c.Out("out", out).In("input", input).In("weight", w).In("index", idx);
          c.Param("scale", 2.0).Param("round", round);
        },
        body);
  return body();
}

// --- GPU modes ---

const kiln::client::CudaDriver* g_driver = nullptr;

void Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  std::fprintf(stderr, "kiln_diag_child: %s failed: %s\n", what, g_driver->ErrorText(r).c_str());
  std::exit(3);
}

void Require(const kiln::Status& s, const char* what) {
  Print(what, s);
  if (!s.ok()) std::exit(4);
}

// A device tensor with its host image (the values as the dtype holds them, as floats).
struct GpuTensor {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape, strides;
  size_t span = 0;  // elements covered
  CUdeviceptr ptr = 0;
  TensorView view;

  GpuTensor(DType d, std::vector<int64_t> sh, std::vector<int64_t> st = {}) : dtype(d), shape(std::move(sh)) {
    strides = st;
    if (strides.empty()) {
      strides.resize(shape.size());
      int64_t s = 1;
      for (size_t i = shape.size(); i-- > 0;) {
        strides[i] = s;
        s *= shape[i];
      }
    }
    span = 1;
    for (size_t i = 0; i < shape.size(); ++i) span += static_cast<size_t>((shape[i] - 1) * strides[i]);
    Check(g_driver->cuMemAlloc(&ptr, span * kiln::DTypeSize(d)), "cuMemAlloc");
    Check(g_driver->cuMemsetD8(ptr, 0xFF, span * kiln::DTypeSize(d)), "cuMemsetD8");
    view.data = reinterpret_cast<void*>(ptr);
    view.dtype = d;
    view.ndim = static_cast<int>(shape.size());
    for (size_t i = 0; i < shape.size(); ++i) {
      view.shape[i] = shape[i];
      view.strides[i] = strides[i];
    }
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  // Element offsets of the view in row-major order.
  std::vector<int64_t> Offsets() const {
    std::vector<int64_t> out;
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t i = 0; i < numel(); ++i) {
      int64_t off = 0;
      for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
      out.push_back(off);
      for (size_t d = shape.size(); d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
    return out;
  }
  void Upload(const std::vector<double>& values) {  // row-major values of the view
    const size_t es = kiln::DTypeSize(dtype);
    std::vector<uint8_t> image(span * es, 0xFF);
    const auto offs = Offsets();
    for (size_t i = 0; i < offs.size(); ++i) {
      uint8_t* p = image.data() + static_cast<size_t>(offs[i]) * es;
      const double v = values[i];
      if (dtype == DType::kFloat32) {
        float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
      }
      if (dtype == DType::kBFloat16) {
        uint16_t b = kiln::client::FloatToBFloat16(static_cast<float>(v));
        std::memcpy(p, &b, 2);
      }
      if (dtype == DType::kInt32) {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
      }
    }
    Check(g_driver->cuMemcpyHtoD(ptr, image.data(), image.size()), "cuMemcpyHtoD");
  }
  std::vector<double> Download() const {
    const size_t es = kiln::DTypeSize(dtype);
    std::vector<uint8_t> image(span * es);
    Check(g_driver->cuCtxSynchronize(), "cuCtxSynchronize");
    Check(g_driver->cuMemcpyDtoH(image.data(), ptr, image.size()), "cuMemcpyDtoH");
    std::vector<double> out;
    for (int64_t off : Offsets()) {
      const uint8_t* p = image.data() + static_cast<size_t>(off) * es;
      if (dtype == DType::kFloat32) {
        float f;
        std::memcpy(&f, p, 4);
        out.push_back(f);
      }
      if (dtype == DType::kBFloat16) {
        uint16_t b;
        std::memcpy(&b, p, 2);
        out.push_back(kiln::client::BFloat16ToFloat(b));
      }
      if (dtype == DType::kInt32) {
        int32_t x;
        std::memcpy(&x, p, 4);
        out.push_back(x);
      }
    }
    return out;
  }
};

std::vector<double> Random(std::mt19937& rng, int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return v;
}

// The statistics the log must show for `t` now (float64 over the values the dtype holds).
void Expect(int call, const char* name, const char* phase, const GpuTensor& t) {
  const std::vector<double> v = t.Download();
  int64_t nan = 0, inf = 0, finite = 0;
  double lo = 0, hi = 0, sum = 0;
  for (double x : v) {
    if (std::isnan(x)) {
      ++nan;
      continue;
    }
    if (std::isinf(x)) {
      ++inf;
      continue;
    }
    lo = finite == 0 ? x : std::min(lo, x);
    hi = finite == 0 ? x : std::max(hi, x);
    sum += x;
    ++finite;
  }
  std::printf("expect #%d %s %s count=%lld nan=%lld inf=%lld min=%.17g max=%.17g mean=%.17g\n", call, name, phase,
              static_cast<long long>(v.size()), static_cast<long long>(nan), static_cast<long long>(inf), lo, hi,
              finite ? sum / static_cast<double>(finite) : 0.0);
}

void GpuSetup() {
  auto driver = kiln::client::CudaDriver::Get();
  if (!driver.ok()) {
    std::fprintf(stderr, "kiln_diag_child: %s\n", driver.status().ToString().c_str());
    std::exit(3);
  }
  g_driver = *driver;
  CUdevice device = 0;
  CUcontext context = nullptr;
  Check(g_driver->cuDeviceGet(&device, 0), "cuDeviceGet");
  Check(g_driver->cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  Check(g_driver->cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

int GpuOps() {
  GpuSetup();
  std::mt19937 rng(20251130);
  const auto bf = DType::kBFloat16;
  {  // 1: silu_and_mul, with a NaN and an Inf in the input
    GpuTensor in(bf, {5, 512}), out(bf, {5, 256});
    auto v = Random(rng, 5 * 512, -4, 4);
    v[3] = std::numeric_limits<double>::quiet_NaN();
    v[700] = std::numeric_limits<double>::infinity();
    in.Upload(v);
    Expect(1, "input", "before", in);
    Require(kiln::ops::silu_and_mul(out.view, in.view), "silu_and_mul");
    Expect(1, "out", "after", out);
  }
  {  // 2: rms_norm on rows padded to 1040 elements
    GpuTensor in(bf, {7, 1024}, {1040, 1}), w(bf, {1024}), out(bf, {7, 1024});
    in.Upload(Random(rng, 7 * 1024, -2, 2));
    w.Upload(Random(rng, 1024, 0.5, 1.5));
    Expect(2, "input", "before", in);
    Expect(2, "weight", "before", w);
    Require(kiln::ops::rms_norm(out.view, in.view, w.view, 1e-6), "rms_norm");
    Expect(2, "out", "after", out);
  }
  {  // 3: fused_add_rms_norm, fp32, both updated in place
    GpuTensor in(DType::kFloat32, {3, 512}), res(DType::kFloat32, {3, 512}), w(DType::kFloat32, {512});
    in.Upload(Random(rng, 3 * 512, -1, 1));
    res.Upload(Random(rng, 3 * 512, -1, 1));
    w.Upload(Random(rng, 512, 0.5, 1.5));
    Expect(3, "input", "before", in);
    Expect(3, "residual", "before", res);
    Expect(3, "weight", "before", w);
    Require(kiln::ops::fused_add_rms_norm(in.view, res.view, w.view, 1e-5), "fused_add_rms_norm");
    Expect(3, "input", "after", in);
    Expect(3, "residual", "after", res);
  }
  {  // 4: apply_rope in place, Llama-3.1 scaling
    GpuTensor q(bf, {4, 8, 128}), k(bf, {4, 2, 128}), pos(DType::kInt32, {4});
    q.Upload(Random(rng, 4 * 8 * 128, -1, 1));
    k.Upload(Random(rng, 4 * 2 * 128, -1, 1));
    pos.Upload({0, 17, 4095, 100000});
    Expect(4, "q", "before", q);
    Expect(4, "k", "before", k);
    kiln::ops::RopeOptions o;
    o.theta = 500000;
    o.llama31 = kiln::ops::Llama31RopeScaling{};
    Require(kiln::ops::apply_rope(q.view, k.view, pos.view, o), "apply_rope");
    Expect(4, "q", "after", q);
    Expect(4, "k", "after", k);
  }
  {  // 5, 6: append_paged_kv, then batch_decode over the pages
    GpuTensor kc(bf, {8, 16, 2, 128}), vc(bf, {8, 16, 2, 128});
    kc.Upload(Random(rng, 8 * 16 * 2 * 128, -1, 1));
    vc.Upload(Random(rng, 8 * 16 * 2 * 128, -1, 1));
    GpuTensor kn(bf, {4, 2, 128}), vn(bf, {4, 2, 128});
    kn.Upload(Random(rng, 4 * 2 * 128, -1, 1));
    vn.Upload(Random(rng, 4 * 2 * 128, -1, 1));
    GpuTensor bi(DType::kInt32, {4}), pos(DType::kInt32, {4}), indptr(DType::kInt32, {3}), indices(DType::kInt32, {5}),
        last(DType::kInt32, {2});
    bi.Upload({0, 0, 1, 1});
    pos.Upload({35, 36, 30, 31});
    indptr.Upload({0, 3, 5});
    indices.Upload({0, 1, 2, 3, 4});
    last.Upload({5, 16});
    Expect(5, "k_cache", "before", kc);
    Expect(5, "k", "before", kn);
    Require(kiln::ops::append_paged_kv(kc.view, vc.view, kn.view, vn.view, bi.view, pos.view, indptr.view, indices.view,
                                       last.view),
            "append_paged_kv");
    Expect(5, "k_cache", "after", kc);
    const int32_t indptr_host[] = {0, 3, 5}, last_host[] = {5, 16};
    auto plan = kiln::ops::BatchDecodePlan::Create(indptr_host, last_host, 2, 8, 2, 128, 16, bf);
    Require(plan.status(), "BatchDecodePlan::Create");
    GpuTensor q(bf, {2, 8, 128}), out(bf, {2, 8, 128}), lse(DType::kFloat32, {2, 8});
    q.Upload(Random(rng, 2 * 8 * 128, -1, 1));
    CUdeviceptr workspace = 0;
    if (plan->workspace_bytes() > 0) Check(g_driver->cuMemAlloc(&workspace, plan->workspace_bytes()), "cuMemAlloc");
    Expect(6, "q", "before", q);
    Require(kiln::ops::batch_decode(*plan, out.view, &lse.view, q.view, kc.view, vc.view, indptr.view, indices.view,
                                    last.view, reinterpret_cast<void*>(workspace), plan->workspace_bytes()),
            "batch_decode");
    Expect(6, "out", "after", out);
    Expect(6, "lse", "after", lse);
  }
  {  // 7: top_p_sampling
    GpuTensor probs(DType::kFloat32, {4, 1000}), samples(DType::kInt32, {4});
    probs.Upload(Random(rng, 4 * 1000, 0, 1));
    Expect(7, "probs", "before", probs);
    Require(kiln::ops::top_p_sampling(samples.view, probs.view, {nullptr, 0.9}, {1234, 5}), "top_p_sampling");
  }
  Check(g_driver->cuCtxSynchronize(), "cuCtxSynchronize");
  return 0;
}

int GpuCapture() {
  GpuSetup();
  std::mt19937 rng(7);
  const auto bf = DType::kBFloat16;
  GpuTensor in(bf, {4, 2048}), w(bf, {2048}), out(bf, {4, 2048});
  in.Upload(Random(rng, 4 * 2048, -2, 2));
  w.Upload(Random(rng, 2048, 0.5, 1.5));
  CUstream stream = nullptr;
  Check(g_driver->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  Check(g_driver->cuCtxSynchronize(), "cuCtxSynchronize");
  Require(kiln::ops::rms_norm(out.view, in.view, w.view, 1e-6, stream), "rms_norm (stream)");
  Check(g_driver->cuStreamSynchronize(stream), "cuStreamSynchronize");
  const std::vector<double> want = out.Download();
  Check(g_driver->cuMemsetD8(out.ptr, 0xFF, out.span * 2), "cuMemsetD8");
  Check(g_driver->cuCtxSynchronize(), "cuCtxSynchronize");

  Check(g_driver->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
  const kiln::Status captured = kiln::ops::rms_norm(out.view, in.view, w.view, 1e-6, stream);
  CUgraph graph = nullptr;
  Check(g_driver->cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  Require(captured, "rms_norm (captured)");
  CUgraphExec exec = nullptr;
  Check(g_driver->cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  Check(g_driver->cuGraphLaunch(exec, stream), "cuGraphLaunch");
  Check(g_driver->cuStreamSynchronize(stream), "cuStreamSynchronize");
  const std::vector<double> got = out.Download();
  bool same = got.size() == want.size();
  for (size_t i = 0; same && i < got.size(); ++i) same = got[i] == want[i];
  std::printf("graph output %s\n", same ? "matches" : "DIFFERS");
  g_driver->cuGraphExecDestroy(exec);
  g_driver->cuGraphDestroy(graph);
  return same ? 0 : 5;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kiln_diag_child MODE ...\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "op-then-abort" || mode == "op-then-exit") {
    Print("rms_norm", RmsNorm());
    std::fflush(stdout);
    if (mode == "op-then-abort") std::abort();
    return 0;
  }
  if (mode == "invalid") {
    auto in = TensorView::Contiguous(Fake(1), DType::kBFloat16, {7, 4096});
    auto out = TensorView::Contiguous(Fake(2), DType::kBFloat16, {7, 2048});
    auto w = TensorView::Contiguous(Fake(3), DType::kBFloat16, {4096});
    Print("rms_norm", kiln::ops::rms_norm(out, in, w, 1e-6));
    return 0;
  }
  if (mode == "c-abi") {
    int64_t shape[2] = {7, 4096};
    DLTensor in{}, out{}, w{};
    for (DLTensor* t : {&in, &out, &w}) {
      t->device = {kDLCUDA, 0};
      t->dtype = {kDLBfloat, 16, 1};
      t->ndim = 2;
      t->shape = shape;
    }
    in.data = Fake(1);
    out.data = Fake(2);
    w.data = Fake(3);
    w.ndim = 1;
    w.shape = shape + 1;
    const kiln_status s = kiln_rms_norm(&out, &in, &w, 1e-6, nullptr);
    std::printf("kiln_rms_norm: %s %s\n", kiln_status_name(s), kiln_last_error());
    return 0;
  }
  if (mode == "all-ops" && argc == 3) return AllOps(argv[2]);
  if (mode == "host-calls" && argc >= 4) {
    const int rounds = std::atoi(argv[2]);
    for (int r = 0; r < rounds; ++r)
      for (int i = 3; i < argc; ++i) Print(argv[i], HostCall(argv[i], r));
    return 0;
  }
  if (mode == "gpu-ops") return GpuOps();
  if (mode == "gpu-capture") return GpuCapture();
  std::fprintf(stderr, "kiln_diag_child: unknown mode %s\n", mode.c_str());
  return 2;
}
