#include "bench/op/call_overhead.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include "bench/op/host_tensor.h"
#include "bench/op/timing_stats.h"
#include "client/core/driver/current_context.h"
#include "client/core/driver/devices.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/loaded_library.h"
#include "client/core/loader/module_cache.h"
#include "client/core/loader/programmatic_launch.h"
#include "client/core/rpc/kernel_request.h"
#include "client/ops/activation/activation_plan.h"
#include "client/ops/norm/norm_plan.h"
#include "kiln/activation/activation_contract.h"
#include "kiln/kernel.h"
#include "kiln/norm/norm_contract.h"
#include "kiln/ops/activation.h"
#include "kiln/ops/norm.h"

namespace kiln::bench {
namespace {

constexpr double kEps = 1e-6;

std::string Format(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// One case: its tensors, the op call, and the hand-made launches of the op's kernel.
struct OverheadCase {
  std::string op;     // "silu_and_mul", the row's label
  std::string shape;  // "rows=1,d=8,d2=16"
  std::vector<DeviceMemory> memory;
  std::vector<HostTensor> host;
  std::vector<TensorView> views;  // in the op's argument order
  size_t out = 0;                 // which view the kernel writes
  std::function<Status(CUstream)> op_call;
  // The op's validation alone (its Plan function on the same views): one stage of the breakdown.
  std::function<bool()> validate;
  std::string uri;  // the module the op launches

  // The raw launch: built once, reused by every call. Every kernel takes one parameter struct
  // (its op contract), kept here.
  CUfunction function = nullptr;
  CUlaunchConfig config = {};
  // The op's launch attribute, so that the raw launch asks the driver for the same work: both
  // ops launch as programmatic dependents on sm_90+ unless KILN_PDL=0.
  CUlaunchAttribute programmatic = {};
  bool is_programmatic = false;
  activation::ActAndMulParams act_params = {};
  norm::RmsNormParams norm_params = {};
  std::vector<void*> args;  // what cuLaunchKernelEx and Kernel::Launch read

  Kernel kernel;  // the public API's handle to the same entry
  LaunchConfig kernel_config;
};

TensorView Contiguous(const DeviceMemory& m, DType dtype, std::vector<int64_t> shape, int device) {
  TensorView v;
  v.data = m.data();
  v.dtype = dtype;
  v.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[static_cast<size_t>(i)];
    v.strides[i] = stride;
    stride *= shape[static_cast<size_t>(i)];
  }
  v.device = Device::CUDA(device);
  return v;
}

Status AddTensor(const BenchDevice& device, OverheadCase* c, DType dtype, std::vector<int64_t> shape,
                 std::mt19937_64& rng) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  HostTensor h = RandomHostTensor(dtype, n, rng);
  KILN_ASSIGN_OR_RETURN(auto m, DeviceMemory::Allocate(device, h.bytes.size()));
  KILN_RETURN_IF_ERROR(
      device.Check(device.driver().cuMemcpyHtoD(m.ptr(), h.bytes.data(), h.bytes.size()), "cuMemcpyHtoD"));
  c->views.push_back(Contiguous(m, dtype, std::move(shape), device.info().ordinal));
  c->memory.push_back(std::move(m));
  c->host.push_back(std::move(h));
  return OkStatus();
}

// After a call of the op: the module it launches — its request's entry in the process's module
// cache, which the op's first call filled — and the CUfunction of `entry` in this context (the
// very function object the op launches), with the block and items per block of the module's
// launch hint. Also the public API's handle to the same entry (kiln::LoadOp, which must give
// the same cubin).
StatusOr<const EntryLaunch*> UseOpModule(OverheadCase* c, int device, const OpRequest& request, const char* entry) {
  KILN_ASSIGN_OR_RETURN(auto driver, client::CudaDriver::Get());
  KILN_ASSIGN_OR_RETURN(auto ctx, client::CurrentContext(*driver, device));
  auto library = client::ModuleCache::Global().Find(
      client::ModuleCache::OpIdentity(request, client::ArchForComputeCapability(ctx.cc_major, ctx.cc_minor)));
  if (library == nullptr)
    return Status(StatusCode::kInternal, c->op + ": the module cache has no entry for the request the op makes (" +
                                             request.name + "); has the op's request changed?");
  const ModuleInfo& info = library->info;
  const EntryLaunch* hint = nullptr;
  for (const EntryLaunch& l : info.launch)
    if (l.entry == entry) hint = &l;
  if (hint == nullptr) return Status(StatusCode::kInternal, info.uri + " has no launch hint for " + entry);
  const int index = library->FindEntry(entry);
  if (index < 0) return Status(StatusCode::kInternal, info.uri + " has no kernel " + entry);
  KILN_ASSIGN_OR_RETURN(auto function, library->Function(static_cast<size_t>(index), ctx.context,
                                                         static_cast<unsigned>(hint->dynamic_smem)));
  c->function = function;
  c->uri = info.uri;

  auto module = LoadOp(request);
  if (!module.ok()) return module.status().WithContext("kiln::LoadOp(" + request.name + ")");
  if (module->info().uri != info.uri || module->info().cache_key != info.cache_key)
    return Status(StatusCode::kFailedPrecondition, c->op + ": kiln::LoadOp gave " + module->info().uri + " (key " +
                                                       module->info().cache_key.substr(0, 12) +
                                                       "), but the op launches " + info.uri + " (key " +
                                                       info.cache_key.substr(0, 12) + ")");
  KILN_ASSIGN_OR_RETURN(auto kernel, module->kernel(entry));
  c->kernel = kernel;
  return hint;
}

// Whether the op launches its kernel as a programmatic dependent here: both cases' kernels wait
// first (OpKernels::Entry::waits_first), so on sm_90+ unless KILN_PDL=0.
bool OpLaunchIsProgrammatic(const BenchDevice& device) {
  return device.info().cc_major >= 9 && client::OpProgrammaticLaunchSwitch().On();
}

void SetLaunch(OverheadCase* c, const EntryLaunch& hint, unsigned grid, CUstream stream, bool programmatic) {
  c->config = {};
  c->is_programmatic = programmatic;
  if (programmatic) {
    c->programmatic.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    c->programmatic.value.programmaticStreamSerializationAllowed = 1;
    c->config.attrs = &c->programmatic;
    c->config.numAttrs = 1;
  }
  c->kernel_config.programmatic_dependent_launch = programmatic;
  c->config.gridDimX = grid;
  c->config.gridDimY = c->config.gridDimZ = 1;
  c->config.blockDimX = static_cast<unsigned>(hint.block);
  c->config.blockDimY = c->config.blockDimZ = 1;
  c->config.sharedMemBytes = static_cast<unsigned>(hint.dynamic_smem);
  c->config.hStream = stream;
  c->kernel_config.grid.x = grid;
  c->kernel_config.block.x = static_cast<unsigned>(hint.block);
  c->kernel_config.dynamic_smem_bytes = static_cast<unsigned>(hint.dynamic_smem);
  c->kernel_config.stream = stream;
}

// silu_and_mul, bf16, input [1, 16] -> out [1, 8].
StatusOr<std::unique_ptr<OverheadCase>> SiluCase(const BenchDevice& device, std::mt19937_64& rng) {
  auto c = std::make_unique<OverheadCase>();
  c->op = "silu_and_mul";
  c->shape = "rows=1,d=8,d2=16";
  KILN_RETURN_IF_ERROR(AddTensor(device, c.get(), DType::kBFloat16, {1, 8}, rng));
  KILN_RETURN_IF_ERROR(AddTensor(device, c.get(), DType::kBFloat16, {1, 16}, rng));
  const TensorView out = c->views[0], input = c->views[1];
  c->op_call = [out, input](CUstream s) { return ops::silu_and_mul(out, input, s); };
  c->validate = [out, input] {
    return client::PlanActAndMul(client::ActivationOp::kSiluAndMul, out, input, "kiln::ops::silu_and_mul").ok();
  };
  KILN_RETURN_IF_ERROR(c->op_call(device.stream()));  // resolves and caches the launch
  KILN_RETURN_IF_ERROR(device.Synchronize());

  KILN_ASSIGN_OR_RETURN(const client::ActivationPlan plan,
                        client::PlanActAndMul(client::ActivationOp::kSiluAndMul, out, input, "kiln-bench --overhead"));
  KILN_ASSIGN_OR_RETURN(
      const EntryLaunch* hint,
      UseOpModule(c.get(), device.info().ordinal,
                  {activation::kSiluAndMulOp, {{kParamDType, "bf16"}, {kParamVec, std::to_string(plan.vec)}}},
                  activation::kSiluAndMulEntry));
  // The op's grid: one block per (row, chunk of items_per_block columns).
  const int64_t chunks = (plan.d + hint->items_per_block - 1) / hint->items_per_block;
  SetLaunch(c.get(), *hint, static_cast<unsigned>(plan.rows * chunks), device.stream(), OpLaunchIsProgrammatic(device));
  c->act_params = {plan.out, plan.input, plan.rows, static_cast<int>(plan.d), plan.out_stride, plan.in_stride};
  c->args = {&c->act_params};
  c->out = 0;
  return c;
}

// rms_norm, bf16, input [1, 128], weight [128] -> out [1, 128].
StatusOr<std::unique_ptr<OverheadCase>> RmsNormCase(const BenchDevice& device, std::mt19937_64& rng) {
  auto c = std::make_unique<OverheadCase>();
  c->op = "rmsnorm";
  c->shape = "rows=1,hidden=128";
  KILN_RETURN_IF_ERROR(AddTensor(device, c.get(), DType::kBFloat16, {1, 128}, rng));
  KILN_RETURN_IF_ERROR(AddTensor(device, c.get(), DType::kBFloat16, {1, 128}, rng));
  KILN_RETURN_IF_ERROR(AddTensor(device, c.get(), DType::kBFloat16, {128}, rng));
  const TensorView out = c->views[0], input = c->views[1], weight = c->views[2];
  c->op_call = [out, input, weight](CUstream s) { return ops::rms_norm(out, input, weight, kEps, s); };
  c->validate = [out, input, weight] {
    return client::PlanRmsNorm(out, input, weight, kEps, "kiln::ops::rms_norm").ok();
  };
  KILN_RETURN_IF_ERROR(c->op_call(device.stream()));
  KILN_RETURN_IF_ERROR(device.Synchronize());

  KILN_ASSIGN_OR_RETURN(const client::NormPlan plan,
                        client::PlanRmsNorm(out, input, weight, kEps, "kiln-bench --overhead"));
  KILN_ASSIGN_OR_RETURN(const EntryLaunch* hint, UseOpModule(c.get(), device.info().ordinal,
                                                             {norm::kRmsNormOp,
                                                              {{kParamDType, "bf16"},
                                                               {norm::kParamHidden, std::to_string(plan.hidden)},
                                                               {kParamVec, std::to_string(plan.vec)}}},
                                                             norm::kRmsNormEntry));
  // items_per_block rows per block; the plan's a is out, b is input.
  const int64_t grid = (plan.rows + hint->items_per_block - 1) / hint->items_per_block;
  SetLaunch(c.get(), *hint, static_cast<unsigned>(grid), device.stream(), OpLaunchIsProgrammatic(device));
  c->norm_params = {plan.a, plan.b, plan.weight, plan.rows, plan.a_stride, plan.b_stride, plan.eps};
  c->args = {&c->norm_params};
  c->out = 0;
  return c;
}

// Poisons the output, runs `launch` once, and compares the output with the op's, bit for bit.
Status SameOutput(const BenchDevice& device, OverheadCase& c, const HostTensor& want, const std::string& what,
                  const std::function<Status()>& launch) {
  const auto& d = device.driver();
  const DeviceMemory& out = c.memory[c.out];
  KILN_RETURN_IF_ERROR(device.Check(d.cuMemsetD8(out.ptr(), 0xFF, out.bytes()), "cuMemsetD8"));
  KILN_RETURN_IF_ERROR(launch());
  KILN_RETURN_IF_ERROR(device.Synchronize());
  HostTensor got = HostTensor::Zeros(want.dtype, want.size());
  KILN_RETURN_IF_ERROR(device.Check(d.cuMemcpyDtoH(got.bytes.data(), out.ptr(), got.bytes.size()), "cuMemcpyDtoH"));
  const Comparison cmp = CompareBits(got, want);
  if (!cmp.ok)
    return Status(StatusCode::kInternal, what + " wrote another output than the op: " + std::to_string(cmp.mismatches) +
                                             " of " + std::to_string(cmp.count) + " elements differ, first " +
                                             cmp.first_mismatch + " (the grid or the arguments differ from the op's)");
  return OkStatus();
}

// One batch: kOverheadCallsPerBatch calls of `call`, each timed on the host (ns appended to
// `samples` when `keep`); the total in ns. A template, so every backend is called the same way
// (no std::function in the timed loop).
template <typename Call>
StatusOr<double> TimeBatch(Call&& call, bool keep, std::vector<double>* samples) {
  using Clock = std::chrono::steady_clock;
  double total = 0;
  for (int i = 0; i < kOverheadCallsPerBatch; ++i) {
    const auto t0 = Clock::now();
    const bool ok = call();
    const auto t1 = Clock::now();
    if (!ok) return Status(StatusCode::kInternal, "a call failed");
    const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    total += ns;
    if (keep) samples->push_back(ns / 1000.0);
  }
  return total;
}

}  // namespace

std::string LoggingState() {
  const char* level = std::getenv("KILN_LOGLEVEL");
  return level == nullptr || *level == '\0' ? "KILN_LOGLEVEL unset" : std::string("KILN_LOGLEVEL=") + level;
}

std::vector<ResultRow> MeasureCallOverhead(const BenchOptions& options, const BenchDevice& device) {
  std::vector<ResultRow> rows;
  const char* kBackends[] = {"kiln", "raw_cuLaunchKernelEx", "kiln_Kernel_Launch"};
  std::mt19937_64 rng(options.seed);
  using Builder = StatusOr<std::unique_ptr<OverheadCase>> (*)(const BenchDevice&, std::mt19937_64&);
  const std::pair<const char*, Builder> kCases[] = {{"silu_and_mul", &SiluCase}, {"rmsnorm", &RmsNormCase}};
  const std::string reproduce = "kiln-bench --overhead --iters " + std::to_string(options.iters) + " --warmup " +
                                std::to_string(options.warmup);

  for (const auto& [name, build] : kCases) {
    ResultRow base;
    base.routine = "call_overhead";
    base.label = name;
    base.dtype = "bf16";
    base.arch = device.arch();
    base.gpu = device.info().name;
    base.mechanism = "host_steady_clock";
    base.l2 = "n/a (host time)";
    base.reproduce = reproduce;
    auto fail = [&](const std::string& status, const std::string& message) {
      for (const char* b : kBackends) {
        ResultRow r = base;
        r.backend = b;
        r.status = status;
        r.message = message;
        rows.push_back(r);
      }
    };
    auto made = build(device, rng);
    if (!made.ok()) {
      fail("error", made.status().ToString());
      continue;
    }
    OverheadCase& c = **made;
    base.shape = c.shape;
    const auto& d = device.driver();
    const CUstream stream = device.stream();

    // The op's output, then the same from both hand-made launches.
    HostTensor want = HostTensor::Zeros(c.host[c.out].dtype, c.host[c.out].size());
    Status checked = c.op_call(stream);
    if (checked.ok()) checked = device.Synchronize();
    if (checked.ok())
      checked = device.Check(d.cuMemcpyDtoH(want.bytes.data(), c.memory[c.out].ptr(), want.bytes.size()),
                             "cuMemcpyDtoH");
    if (checked.ok())
      checked = SameOutput(device, c, want, "cuLaunchKernelEx of the op's CUfunction", [&] {
        return device.Check(d.cuLaunchKernelEx(&c.config, c.function, c.args.data(), nullptr), "cuLaunchKernelEx");
      });
    if (checked.ok())
      checked = SameOutput(device, c, want, "kiln::Kernel::Launch",
                           [&] { return c.kernel.Launch(c.kernel_config, c.args.data()); });
    if (!checked.ok()) {
      std::fprintf(stderr, "kiln-bench: REFCHECK FAILED: call_overhead %s: %s\n", name, checked.ToString().c_str());
      fail("refcheck_failed", checked.ToString());
      continue;
    }

    // The backends take turns, batch by batch (the first one rotating), so drift in the
    // machine's state falls on all of them alike.
    auto op = [&] { return c.op_call(stream).ok(); };
    auto raw = [&] { return d.cuLaunchKernelEx(&c.config, c.function, c.args.data(), nullptr) == CUDA_SUCCESS; };
    auto launch = [&] { return c.kernel.Launch(c.kernel_config, c.args.data()).ok(); };
    std::vector<double> samples[3], batch_means[3];
    Status timed = OkStatus();
    const int total = options.warmup + options.iters;
    for (int rep = 0; rep < total && timed.ok(); ++rep) {
      const bool keep = rep >= options.warmup;
      for (int k = 0; k < 3 && timed.ok(); ++k) {
        const int which = (rep + k) % 3;
        StatusOr<double> ns = which == 0   ? TimeBatch(op, keep, &samples[0])
                              : which == 1 ? TimeBatch(raw, keep, &samples[1])
                                           : TimeBatch(launch, keep, &samples[2]);
        if (!ns.ok()) {
          timed = Status(StatusCode::kInternal, std::string(kBackends[which]) + ": " + ns.status().message());
          break;
        }
        if (keep) batch_means[which].push_back(*ns / 1000.0 / kOverheadCallsPerBatch);
        timed = device.Synchronize();  // bounds the launch queue; not timed
      }
    }
    if (!timed.ok()) {
      fail("error", timed.ToString());
      continue;
    }

    // Where the op's extra time goes: three stages of its call, each timed alone the same way
    // (batches of kOverheadCallsPerBatch, the launches synchronized between batches): the op's
    // validation, the current-context lookup every launch path makes, and LaunchFunction (the
    // CUlaunchConfig built from a kiln::LaunchConfig, then cuLaunchKernelEx). What is left of
    // the op's median is its launch lookup and the status plumbing between the layers.
    const int ordinal = device.info().ordinal;
    auto validate = [&] { return c.validate(); };
    auto context = [&] { return client::CurrentContext(d, ordinal).ok(); };
    auto launch_function = [&] {
      return client::LaunchFunction(d, c.function, c.kernel_config, c.args.data(), "stage").ok();
    };
    auto nothing = [] { return true; };  // the two clock reads every sample includes
    std::vector<double> stage_samples[4];
    for (int rep = 0; rep < total && timed.ok(); ++rep) {
      const bool keep = rep >= options.warmup;
      for (int k = 0; k < 4 && timed.ok(); ++k) {
        StatusOr<double> ns = k == 0   ? TimeBatch(validate, keep, &stage_samples[0])
                              : k == 1 ? TimeBatch(context, keep, &stage_samples[1])
                              : k == 2 ? TimeBatch(launch_function, keep, &stage_samples[2])
                                       : TimeBatch(nothing, keep, &stage_samples[3]);
        timed = ns.ok() ? device.Synchronize() : ns.status();
      }
    }
    if (!timed.ok()) {
      fail("error", "timing the stages: " + timed.ToString());
      continue;
    }

    TimingStats stats[3];
    double batch_median[3];
    for (int k = 0; k < 3; ++k) {
      stats[k] = SummarizeTimes(samples[k]);
      batch_median[k] = SummarizeTimes(batch_means[k]).median;
    }
    for (int k = 0; k < 3; ++k) {
      ResultRow r = base;
      r.backend = kBackends[k];
      r.stats = stats[k];
      r.warmup = options.warmup * kOverheadCallsPerBatch;
      r.overhead_us = stats[k].median - stats[1].median;
      r.refcheck = k == 0 ? "baseline" : "pass";
      r.refcheck_detail = k == 0 ? "the op's output; its kernel " + c.uri
                                 : "output bit-identical to the op's (same CUfunction, grid and arguments)";
      r.kernels = c.uri;
      r.message = "per call: median " + Format("%.3f", stats[k].median) + " us, batch mean " +
                  Format("%.3f", batch_median[k]) + " us (" + std::to_string(options.iters) + " batches of " +
                  std::to_string(kOverheadCallsPerBatch) + " calls, " + LoggingState() + "; every launch " +
                  (c.is_programmatic ? "a programmatic dependent" : "in plain stream order") + ")";
      if (k == 0)
        r.message += "; op call - raw cuLaunchKernelEx = " + Format("%+.3f", r.overhead_us) +
                     " us per call (median; batch means " + Format("%+.3f", batch_median[0] - batch_median[1]) +
                     " us); target <= 0.2 us with logging off; stages alone (median): validation " +
                     Format("%.3f", SummarizeTimes(stage_samples[0]).median) + " us, current context " +
                     Format("%.3f", SummarizeTimes(stage_samples[1]).median) + " us, LaunchFunction " +
                     Format("%.3f", SummarizeTimes(stage_samples[2]).median) + " us (raw cuLaunchKernelEx " +
                     Format("%.3f", stats[1].median) + "), an empty call " +
                     Format("%.3f", SummarizeTimes(stage_samples[3]).median) + " us (the clock reads in every figure)";
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace kiln::bench
