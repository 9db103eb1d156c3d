#include "bench/op/case_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <type_traits>

namespace kiln::bench {
namespace {

constexpr size_t kAlignment = 256;  // every tensor of a set starts on a 256-byte boundary

size_t AlignUp(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

// FNV-1a: a case's random data depends on the seed and the case, never on the run order.
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

TensorView ContiguousView(CUdeviceptr ptr, const TensorSpec& t, int device) {
  TensorView v;
  v.data = reinterpret_cast<void*>(ptr);
  v.dtype = t.dtype;
  v.ndim = static_cast<int>(t.shape.size());
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = t.shape[static_cast<size_t>(i)];
    v.strides[i] = stride;
    stride *= t.shape[static_cast<size_t>(i)];
  }
  v.device = Device::CUDA(device);
  return v;
}

bool Written(const TensorSpec& t) { return t.role != TensorRole::kInput; }
bool Read(const TensorSpec& t) { return t.role != TensorRole::kOutput; }

std::string Format(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string Megabytes(double bytes) { return Format("%.0f MB", bytes / 1e6); }

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// A case's host inputs: random data for every read tensor the routine does not fill itself,
// zeros for the rest, then the routine's own (page tables, probabilities, patterns).
StatusOr<std::vector<HostTensor>> HostInputs(const Routine& routine, const CaseSpec& spec, const ShapeAxes& shape,
                                             std::mt19937_64& rng) {
  std::vector<HostTensor> host;
  for (const auto& t : spec.tensors)
    host.push_back(Read(t) && !t.routine_fills ? RandomHostTensor(t.dtype, t.numel(), rng, t.lo, t.hi)
                                               : HostTensor::Zeros(t.dtype, t.numel()));
  KILN_RETURN_IF_ERROR(routine.FillInputs(spec, shape, rng, &host));
  return host;
}

// Written tensor i of `got` against `want` (another GPU result, or float64 values).
template <typename Want>
Comparison CompareOutput(const TensorSpec& t, const HostTensor& got, const Want& want, DType dtype, bool cross) {
  if constexpr (std::is_same_v<Want, HostTensor>) {
    if (t.exact) return CompareBits(got, want);
  }
  return Compare(got, want, t.exact ? Tolerance{0, 0} : ToleranceFor(t, dtype, cross));
}

// "" when two runs of a backend on the same inputs wrote the same bits, else what differs.
std::string Reproducible(const CaseSpec& spec, const std::vector<HostTensor>& first,
                         const std::vector<HostTensor>& second) {
  std::string out;
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    if (!Written(spec.tensors[i])) continue;
    const Comparison c = CompareBits(second[i], first[i]);
    if (!c.ok)
      out += "'" + spec.tensors[i].name + "' differs between two calls on the same inputs (" +
             std::to_string(c.mismatches) + " of " + std::to_string(c.count) + ", first " + c.first_mismatch + "); ";
  }
  return out;
}

}  // namespace

namespace {

// A copy kernel of 16-byte vectors, several in flight per thread: on an H200 it moves about
// 4.2 TB/s (read + write) where cuMemcpyDtoDAsync moves about 2.8, so the baseline is the
// faster of the two — "% of copy" must not flatter the ops.
constexpr const char* kCopySource = R"(
extern "C" __global__ void __launch_bounds__(512) kiln_bench_copy(const uint4* __restrict__ src,
                                                                  uint4* __restrict__ dst,
                                                                  unsigned long long n) {
  const unsigned long long stride = 4ull * gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * 4ull * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k * blockDim.x < n) v[k] = __ldcs(src + i + k * blockDim.x);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (i + k * blockDim.x < n) __stcs(dst + i + k * blockDim.x, v[k]);
  }
}
)";

// A read-only kernel of 16-byte streaming loads, four in flight per thread, folded into one
// word per thread that is stored only if it equals a value random bytes almost never give: the
// loads cannot be dropped, and almost nothing is written. The ceiling of read-mostly ops (decode,
// sampling, GEMV-shaped paths), which read faster than copy moves data
// (each byte of a copy is read and written).
constexpr const char* kReadSource = R"(
extern "C" __global__ void __launch_bounds__(512) kiln_bench_read(const uint4* __restrict__ src,
                                                                  unsigned* __restrict__ sink,
                                                                  unsigned long long n) {
  const unsigned long long stride = 4ull * gridDim.x * blockDim.x;
  unsigned folded = 0;
  for (unsigned long long i = blockIdx.x * 4ull * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      v[k] = i + k * blockDim.x < n ? __ldcs(src + i + k * blockDim.x) : uint4{0u, 0u, 0u, 0u};
#pragma unroll
    for (int k = 0; k < 4; ++k) folded ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  if (folded == 0x9E3779B9u) sink[0] = folded;
}
)";

// The launch of either kernel over `vectors` 16-byte vectors: 512 threads of four vectors a
// pass, at most 8 blocks an SM of the H200's 132.
LaunchConfig BandwidthKernelConfig(unsigned long long vectors, void* stream) {
  LaunchConfig config;
  config.block.x = 512;
  config.grid.x = static_cast<unsigned>(std::min<unsigned long long>((vectors + 2047) / 2048, 132ull * 8));
  config.stream = stream;
  return config;
}

}  // namespace

StatusOr<CopyBaseline> MeasureCopyBandwidth(const BenchDevice& device, Timer& timer) {
  // 512 MiB each way: far beyond L2, long enough (about 250 us on an H200) to time well.
  const size_t bytes = std::min<size_t>(size_t{512} << 20, device.free_bytes() / 4) / 16 * 16;
  KILN_ASSIGN_OR_RETURN(auto src, DeviceMemory::Allocate(device, bytes));
  KILN_ASSIGN_OR_RETURN(auto dst, DeviceMemory::Allocate(device, bytes));
  KILN_RETURN_IF_ERROR(device.Check(device.driver().cuMemsetD8(src.ptr(), 0x5A, bytes), "cuMemsetD8"));
  const auto& d = device.driver();
  auto measure = [&](const std::function<Status(int)>& copy) -> StatusOr<double> {
    for (int i = 0; i < 3; ++i) KILN_RETURN_IF_ERROR(copy(i));
    const auto nothing_between = [](int) { return OkStatus(); };
    KILN_ASSIGN_OR_RETURN(const TimedRun run, timer.Measure(20, nothing_between, copy));
    return SummarizeTimes(run.us).median;
  };
  const auto memcpy_copy = [&](int) {
    return device.Check(d.cuMemcpyDtoDAsync(dst.ptr(), src.ptr(), bytes, device.stream()), "cuMemcpyDtoDAsync");
  };
  KILN_ASSIGN_OR_RETURN(const double memcpy_us, measure(memcpy_copy));

  CopyBaseline b;
  b.bytes = bytes;
  b.median_us = memcpy_us;
  b.what = "cuMemcpyDtoDAsync";
  SourceRequest source;
  source.name = "kiln_bench_copy";
  source.code = kCopySource;
  source.entries = {"kiln_bench_copy"};
  auto module = LoadSource(source);
  if (module.ok()) {
    KILN_ASSIGN_OR_RETURN(auto kernel, module->kernel("kiln_bench_copy"));
    const unsigned long long vectors = bytes / 16;
    const LaunchConfig config = BandwidthKernelConfig(vectors, device.stream());
    const auto kernel_copy = [&](int) {
      return kernel(config, reinterpret_cast<const void*>(src.ptr()), reinterpret_cast<void*>(dst.ptr()), vectors);
    };
    KILN_ASSIGN_OR_RETURN(const double kernel_us, measure(kernel_copy));
    if (kernel_us < b.median_us) {
      b.median_us = kernel_us;
      b.what = "copy kernel (16-byte vectors)";
    }
  } else {
    std::fprintf(stderr, "# copy kernel unavailable (%s); the baseline is cuMemcpyDtoDAsync\n",
                 module.status().ToString().c_str());
  }
  b.gbps = 2.0 * static_cast<double>(bytes) / (b.median_us * 1e3);
  b.mechanism = timer.mechanism();

  SourceRequest read_source;
  read_source.name = "kiln_bench_read";
  read_source.code = kReadSource;
  read_source.entries = {"kiln_bench_read"};
  // The ceiling is extra: a run without it still has every row (pct_of_read empty).
  auto read_us = [&]() -> StatusOr<double> {
    KILN_ASSIGN_OR_RETURN(auto module, LoadSource(read_source));
    KILN_ASSIGN_OR_RETURN(auto kernel, module.kernel("kiln_bench_read"));
    const unsigned long long vectors = bytes / 16;
    const LaunchConfig config = BandwidthKernelConfig(vectors, device.stream());
    const auto kernel_read = [&](int) {
      return kernel(config, reinterpret_cast<const void*>(src.ptr()), reinterpret_cast<void*>(dst.ptr()), vectors);
    };
    return measure(kernel_read);
  }();
  if (read_us.ok()) {
    b.read_us = *read_us;
    b.read_gbps = static_cast<double>(bytes) / (b.read_us * 1e3);
  } else {
    std::fprintf(stderr, "# read-only ceiling unavailable (%s); pct_of_read is empty in this run\n",
                 read_us.status().ToString().c_str());
  }
  return b;
}

CaseRunner::CaseRunner(const BenchOptions& options, const BenchDevice& device, Timer* cupti, Timer& events,
                       CopyBaseline copy)
    : options_(options), device_(device), cupti_(cupti), events_(events), copy_(copy) {}

const CaseRunner::CheckedReference& CaseRunner::ReferenceOnCpu(const Routine& routine, DType dtype) {
  const std::string key = std::string(routine.name()) + "/" + DTypeName(dtype);
  auto it = reference_checked_.find(key);
  if (it != reference_checked_.end()) return it->second;
  return reference_checked_[key] = CheckOnCpu(routine, "reference", dtype, routine.SmallShape());
}

CaseRunner::CheckedReference CaseRunner::CheckOnCpu(const Routine& routine, const std::string& backend, DType dtype,
                                                    const ShapeAxes& shape) {
  const std::string key = std::string(routine.name()) + "/" + DTypeName(dtype);
  const std::string where = "the " + backend + " backend of " + key + " at " + FormatShape(shape);
  CheckedReference result;
  auto fail = [&](const Status& s) {
    result.status = Status(s.code(), where + ": " + s.message());
    return result;
  };
  auto spec = routine.Describe(shape, dtype);
  if (!spec.ok()) return fail(spec.status());
  // Fresh inputs per backend and shape: a backend cannot pass on data another one was checked on.
  std::mt19937_64 rng(options_.seed ^ Fnv1a("cpu-check " + key + " " + backend + " " + FormatShape(shape)));
  auto inputs = HostInputs(routine, *spec, shape, rng);
  if (!inputs.ok()) return fail(inputs.status());
  const std::vector<HostTensor>& host = *inputs;
  std::vector<DeviceMemory> memory;
  TensorSet set;
  for (const auto& t : spec->tensors) {
    auto m = DeviceMemory::Allocate(device_, t.bytes());
    if (!m.ok()) return fail(m.status());
    set.push_back(ContiguousView(m->ptr(), t, device_.info().ordinal));
    memory.push_back(std::move(*m));
  }
  auto fn = routine.Prepare(backend, *spec, shape, dtype);
  if (!fn.ok()) {
    result.not_applicable = fn.status().code() == StatusCode::kInvalidArgument;
    return fail(fn.status());
  }
  auto got = RunOnce(*fn, *spec, host, set);
  if (!got.ok()) return fail(got.status());

  if (routine.ChecksDraws()) {
    // Draws: inside the float64 allowed sets, and the same draws again on the same inputs.
    auto validity = routine.DrawCheck(*spec, host);
    if (!validity.ok()) return fail(validity.status());
    const Comparison c = validity->check(*got);
    if (!c.ok)
      return fail(Status(StatusCode::kInternal, std::to_string(c.mismatches) + " of " + std::to_string(c.count) +
                                                    " draws outside the allowed sets; first " + c.first_mismatch));
    auto again = RunOnce(*fn, *spec, host, set);
    if (!again.ok()) return fail(again.status());
    if (std::string diff = Reproducible(*spec, *got, *again); !diff.empty())
      return fail(Status(StatusCode::kInternal, "not deterministic: " + diff));
    result.detail = backend + "'s draws checked against float64 allowed sets on the CPU at " + FormatShape(shape) +
                    " (" + validity->what + "), reproducible";
    return result;
  }

  std::map<size_t, std::vector<double>> expected;
  if (Status s = routine.CpuReference(*spec, host, &expected); !s.ok()) return fail(s);
  double max_err = 0, worst = 0;
  for (size_t i = 0; i < spec->tensors.size(); ++i) {
    if (!Written(spec->tensors[i])) continue;
    auto want = expected.find(i);
    if (want == expected.end())
      return fail(Status(StatusCode::kInternal,
                         "the routine's CPU reference gives nothing for '" + spec->tensors[i].name + "'"));
    const Comparison c = CompareOutput(spec->tensors[i], (*got)[i], want->second, dtype, /*cross=*/false);
    if (!c.ok)
      return fail(Status(StatusCode::kInternal, "'" + spec->tensors[i].name + "' differs from float64: " +
                                                    std::to_string(c.mismatches) + " of " + std::to_string(c.count) +
                                                    " elements outside tolerance; first " + c.first_mismatch));
    max_err = std::max(max_err, c.max_abs_err);
    worst = std::max(worst, c.worst_fraction);
  }
  result.detail = backend + " checked against float64 on the CPU at " + FormatShape(shape) + ": max abs err " +
                  Format("%.3g", max_err) + " (" + Format("%.2f", worst) + " of the tolerance)";
  return result;
}

StatusOr<std::vector<HostTensor>> CaseRunner::RunOnce(const BackendFn& fn, const CaseSpec& spec,
                                                      const std::vector<HostTensor>& host, const TensorSet& set) {
  const auto& d = device_.driver();
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const CUdeviceptr p = reinterpret_cast<CUdeviceptr>(set[i].data);
    if (Read(spec.tensors[i]))
      KILN_RETURN_IF_ERROR(
          device_.Check(d.cuMemcpyHtoD(p, host[i].bytes.data(), host[i].bytes.size()), "cuMemcpyHtoD"));
    else  // poison: 0xFF is NaN in every float dtype, so an element never written fails the check
      KILN_RETURN_IF_ERROR(device_.Check(d.cuMemsetD8(p, 0xFF, spec.tensors[i].bytes()), "cuMemsetD8"));
  }
  KILN_RETURN_IF_ERROR(fn(set, device_.stream()));
  KILN_RETURN_IF_ERROR(device_.Synchronize());
  std::vector<HostTensor> out(spec.tensors.size());
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    if (!Written(spec.tensors[i])) continue;
    out[i] = HostTensor::Zeros(spec.tensors[i].dtype, spec.tensors[i].numel());
    KILN_RETURN_IF_ERROR(device_.Check(d.cuMemcpyDtoH(out[i].bytes.data(), reinterpret_cast<CUdeviceptr>(set[i].data),
                                                      out[i].bytes.size()),
                                       "cuMemcpyDtoH"));
  }
  return out;
}

Status CaseRunner::Time(const BackendFn& fn, const CaseSpec& spec, ResultRow* row) {
  const auto& d = device_.driver();
  const int nsets = static_cast<int>(sets_.size());
  // Every set starts from the same pristine inputs (in-place ops drift them while timed).
  for (size_t i = 0; i < spec.tensors.size(); ++i)
    if (Read(spec.tensors[i]))
      KILN_RETURN_IF_ERROR(device_.Check(d.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(sets_[0][i].data),
                                                        pristine_[i].bytes.data(), pristine_[i].bytes.size()),
                                         "cuMemcpyHtoD"));
  for (int s = 1; s < nsets; ++s)
    KILN_RETURN_IF_ERROR(
        device_.Check(d.cuMemcpyDtoDAsync(pool_.ptr() + s * set_stride_, pool_.ptr(), set_stride_, device_.stream()),
                      "cuMemcpyDtoDAsync"));
  // Those copies left the sets in L2; a set must be cold at its first timed use too.
  if (options_.l2 != L2Mode::kWarm)
    KILN_RETURN_IF_ERROR(device_.Check(d.cuMemsetD8Async(flush_.ptr(), 0, flush_.bytes(), device_.stream()),
                                       "cuMemsetD8Async (L2 flush)"));
  KILN_RETURN_IF_ERROR(device_.Synchronize());

  // Warm-up, which also estimates a call's time for the --max-seconds budget.
  const int warmup = std::max(options_.warmup, 1);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup; ++i) KILN_RETURN_IF_ERROR(fn(sets_[i % nsets], device_.stream()));
  KILN_RETURN_IF_ERROR(device_.Synchronize());
  const double per_call_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / warmup;
  int iterations = options_.iters;
  if (per_call_s * iterations > options_.max_seconds) {
    iterations = std::max(10, static_cast<int>(options_.max_seconds / per_call_s));
    if (iterations < options_.iters)
      row->message += "iterations cut from " + std::to_string(options_.iters) + " to " + std::to_string(iterations) +
                      " by --max-seconds; ";
    else iterations = options_.iters;
  }

  auto between = [&](int) -> Status {
    if (l2_mode_ != L2Mode::kFlush) return OkStatus();
    return device_.Check(d.cuMemsetD8Async(flush_.ptr(), 0, flush_.bytes(), device_.stream()),
                         "cuMemsetD8Async (L2 flush)");
  };
  auto call = [&](int i) { return fn(sets_[(warmup + i) % nsets], device_.stream()); };

  Timer* timer = cupti_ != nullptr ? cupti_ : &events_;
  auto run = timer->Measure(iterations, between, call);
  if (!run.ok() && timer != &events_ && run.status().code() == StatusCode::kUnavailable &&
      options_.timer != TimerChoice::kCupti) {
    row->message += run.status().message() + "; timed with CUDA events instead; ";
    timer = &events_;
    run = timer->Measure(iterations, between, call);
  }
  if (!run.ok()) return run.status();
  row->stats = SummarizeTimes(run->us);
  if (l2_mode_ != L2Mode::kFlush) row->stream_us = run->stream_us;
  row->warmup = warmup;
  row->mechanism = timer->mechanism();
  row->kernels = run->kernels;
  row->kernel_parts = run->kernel_parts;
  if (!run->warning.empty()) row->message += run->warning + "; ";
  return OkStatus();
}

std::vector<ResultRow> CaseRunner::Run(const BenchCase& c) {
  ResultRow base;
  base.routine = c.routine;
  base.label = c.label;
  base.shape = FormatShape(c.shape);
  base.dtype = c.dtype;
  base.arch = device_.arch();
  base.gpu = device_.info().name;
  base.copy_gbps = copy_.gbps;
  base.read_gbps = copy_.read_gbps;
  std::vector<ResultRow> rows;
  auto all_fail = [&](const std::string& status, const std::string& message, const std::vector<std::string>& backends) {
    for (const auto& b : backends.empty() ? std::vector<std::string>{"-"} : backends) {
      ResultRow r = base;
      r.backend = b;
      r.status = status;
      r.message = c.origin + ": " + message;
      if (b != "-") r.reproduce = ReproduceCommand(options_, c, b);
      rows.push_back(r);
    }
    return rows;
  };

  const Routine* routine = RoutineRegistry::Global().Find(c.routine);
  if (routine == nullptr) {
    std::vector<std::string> names;
    for (const Routine* r : RoutineRegistry::Global().All()) names.emplace_back(r->name());
    return all_fail("skipped",
                    "kiln-bench has no routine '" + c.routine + "' (routines: " + Join(names) +
                        "; add one in bench/op/routines/, docs/benchmarking.md)",
                    {});
  }
  std::vector<std::string> backends;
  for (const auto& b : c.backends) {
    if (b == "all") {
      for (const auto& info : routine->backends())
        if (std::find(backends.begin(), backends.end(), info.name) == backends.end()) backends.push_back(info.name);
    } else if (std::find(backends.begin(), backends.end(), b) == backends.end()) {
      backends.push_back(b);
    }
  }
  auto dtype = ParseDType(c.dtype);
  if (!dtype.ok()) return all_fail("error", dtype.status().message(), backends);
  std::vector<std::string> dtype_names;
  for (DType d : routine->dtypes()) dtype_names.emplace_back(DTypeName(d));
  if (std::find(dtype_names.begin(), dtype_names.end(), c.dtype) == dtype_names.end())
    return all_fail("error", c.routine + " takes dtype " + Join(dtype_names) + ", not " + c.dtype, backends);
  const std::vector<std::string> axes = routine->axes();
  std::set<std::string> given;
  for (const auto& [name, value] : c.shape) given.insert(name);
  if (given != std::set<std::string>(axes.begin(), axes.end()))
    return all_fail("error", c.routine + " takes the axes " + Join(axes) + "; the case gives " + FormatShape(c.shape),
                    backends);
  auto spec = routine->Describe(c.shape, *dtype);
  if (!spec.ok()) return all_fail("error", spec.status().message(), backends);

  const CheckedReference& checked = ReferenceOnCpu(*routine, *dtype);
  if (!checked.status.ok())
    return all_fail("refcheck_failed", "REFERENCE BROKEN: " + checked.status.message(), backends);

  // The rotation sets: enough copies of every tensor that a set's data left L2 before it is
  // used again (2x L2 of other sets' traffic in between), at most one per call, within half
  // of the free memory. What must leave L2 is what a call touches (spec->footprint): when
  // that is a sliver of a huge set (64 tokens appended to a 2 GB cache) and the sets that
  // rotation would need do not fit, a flush before each call defeats L2 instead.
  set_stride_ = 0;
  for (const auto& t : spec->tensors) set_stride_ += AlignUp(t.bytes());
  const double l2 = static_cast<double>(device_.l2_bytes());
  const double touched = spec->footprint > 0 ? std::min(spec->footprint, static_cast<double>(set_stride_))
                                             : static_cast<double>(set_stride_);
  const int calls = std::max(options_.warmup, 1) + options_.iters;
  int nsets = 1;
  int needed = 1;
  l2_mode_ = options_.l2;
  if (options_.l2 == L2Mode::kRotate) {
    needed = static_cast<int>(std::min(std::ceil(2.0 * l2 / touched) + 1, 1e6));
    const size_t fit = device_.free_bytes() / 2 / set_stride_;
    nsets = std::max(1, std::min<int>({needed, calls, static_cast<int>(std::min<size_t>(fit, 1 << 20))}));
    if (nsets < needed && nsets < calls && touched < static_cast<double>(set_stride_)) {
      nsets = 1;
      l2_mode_ = L2Mode::kFlush;
    }
  }
  if (set_stride_ * static_cast<size_t>(nsets) > device_.free_bytes() / 2 && nsets == 1)
    return all_fail("error",
                    "one set of tensors (" + Megabytes(static_cast<double>(set_stride_)) +
                        ") needs more than half of the free device memory",
                    backends);
  sets_.clear();
  pool_ = DeviceMemory();
  auto pool = DeviceMemory::Allocate(device_, set_stride_ * static_cast<size_t>(nsets));
  if (!pool.ok()) return all_fail("error", pool.status().message(), backends);
  pool_ = std::move(*pool);
  for (int s = 0; s < nsets; ++s) {
    TensorSet set;
    size_t offset = static_cast<size_t>(s) * set_stride_;
    for (const auto& t : spec->tensors) {
      set.push_back(ContiguousView(pool_.ptr() + offset, t, device_.info().ordinal));
      offset += AlignUp(t.bytes());
    }
    sets_.push_back(std::move(set));
  }
  if (options_.l2 != L2Mode::kWarm && flush_.bytes() == 0) {
    auto flush = DeviceMemory::Allocate(device_, 2 * device_.l2_bytes());
    if (!flush.ok()) return all_fail("error", flush.status().message(), backends);
    flush_ = std::move(*flush);
  }
  std::string l2_mode;
  switch (l2_mode_) {
    case L2Mode::kRotate:
      l2_mode = "rotate " + std::to_string(nsets) + " sets (" + Megabytes(static_cast<double>(set_stride_) * nsets) +
                ")";
      if (touched * (nsets - 1) < 2 * l2 && nsets < calls) l2_mode += ", less than 2x L2: partly warm";
      break;
    case L2Mode::kFlush:
      l2_mode = "flush (memset of " + Megabytes(2 * l2) + " before each call)";
      if (options_.l2 == L2Mode::kRotate)
        l2_mode += ": a call touches " + Megabytes(touched) + " of a " + Megabytes(static_cast<double>(set_stride_)) +
                   " set; rotation would need " + std::to_string(needed) + " sets";
      break;
    case L2Mode::kWarm: l2_mode = "warm (one set, may stay in L2)"; break;
  }

  std::mt19937_64 rng(options_.seed ^ Fnv1a(c.routine + " " + c.dtype + " " + FormatShape(c.shape)));
  auto inputs = HostInputs(*routine, *spec, c.shape, rng);
  if (!inputs.ok()) return all_fail("error", inputs.status().message(), backends);
  pristine_ = std::move(*inputs);
  // Draws are checked against the allowed sets of these inputs (computed once, for every backend).
  DrawValidity validity;
  if (routine->ChecksDraws()) {
    auto v = routine->DrawCheck(*spec, pristine_);
    if (!v.ok()) return all_fail("error", "draw check: " + v.status().message(), backends);
    validity = std::move(*v);
  }

  // The baseline: the reference backend's outputs on set 0.
  auto reference = routine->Prepare("reference", *spec, c.shape, *dtype);
  if (!reference.ok()) return all_fail("error", "reference backend: " + reference.status().message(), backends);
  auto want = RunOnce(*reference, *spec, pristine_, sets_[0]);
  if (!want.ok()) return all_fail("error", "reference backend: " + want.status().message(), backends);

  for (const auto& b : backends) {
    ResultRow row = base;
    row.backend = b;
    row.reproduce = ReproduceCommand(options_, c, b);
    row.bytes = spec->bytes;
    row.flops = spec->flops;
    row.l2 = l2_mode;
    auto finish = [&](const std::string& status, const std::string& message) {
      row.status = status;
      row.message = c.origin + ": " + message;
      rows.push_back(row);
    };
    if (!HasBackend(*routine, b)) {
      std::vector<std::string> names;
      for (const auto& info : routine->backends()) names.push_back(info.name);
      finish("error", c.routine + " has no backend '" + b + "' (backends: " + Join(names) + ")");
      continue;
    }
    BackendFn fn;
    std::vector<HostTensor> got;
    if (b == "reference") {
      fn = *reference;
      if (routine->ChecksDraws()) got = *want;  // (a copy only where it is checked: caches are gigabytes)
    } else {
      auto prepared = routine->Prepare(b, *spec, c.shape, *dtype);
      if (!prepared.ok()) {
        finish("error", prepared.status().message());
        continue;
      }
      fn = *prepared;
      auto out = RunOnce(fn, *spec, pristine_, sets_[0]);
      if (!out.ok()) {
        finish("error", out.status().message());
        continue;
      }
      got = std::move(*out);
    }

    std::string failures;
    if (routine->ChecksDraws()) {
      // Every backend, the reference included: its draws inside the allowed sets, and the
      // same draws again from a second call on the same inputs.
      const Comparison cmp = validity.check(got);
      if (!cmp.ok)
        failures += std::to_string(cmp.mismatches) + " of " + std::to_string(cmp.count) +
                    " draws outside the float64 allowed sets, first " + cmp.first_mismatch + "; ";
      auto again = RunOnce(fn, *spec, pristine_, sets_[0]);
      if (!again.ok()) {
        finish("error", again.status().message());
        continue;
      }
      failures += Reproducible(*spec, got, *again);
      row.max_abs_err = 0;
      if (failures.empty()) {
        row.refcheck = b == "reference" ? "baseline" : "pass";
        row.refcheck_detail = "every draw inside its float64 allowed set (" + validity.what +
                              "); a second call reproduced them" +
                              (b == "reference" ? "; " + checked.detail : std::string());
      }
    } else if (b == "reference") {
      row.refcheck = "baseline";
      row.refcheck_detail = checked.detail;
    } else {
      double max_err = 0, worst = 0;
      size_t elements = 0;
      for (size_t i = 0; i < spec->tensors.size(); ++i) {
        if (!Written(spec->tensors[i])) continue;
        const Comparison cmp = CompareOutput(spec->tensors[i], got[i], (*want)[i], *dtype, /*cross=*/true);
        elements += cmp.count;
        max_err = std::max(max_err, cmp.max_abs_err);
        worst = std::max(worst, cmp.worst_fraction);
        if (!cmp.ok)
          failures += "'" + spec->tensors[i].name + "': " + std::to_string(cmp.mismatches) + " of " +
                      std::to_string(cmp.count) + " elements differ from the reference" +
                      (spec->tensors[i].exact ? " (bit for bit)" : "") + ", first " + cmp.first_mismatch + "; ";
      }
      row.max_abs_err = max_err;
      if (failures.empty()) {
        row.refcheck = "pass";
        row.refcheck_detail = "max abs err " + Format("%.3g", max_err) + " (" + Format("%.2f", worst) +
                              " of the tolerance) over " + std::to_string(elements) + " elements";
      }
    }
    if (!failures.empty()) {
      row.refcheck = "FAIL";
      row.refcheck_detail = failures;
      std::fprintf(stderr, "kiln-bench: REFCHECK FAILED: %s %s %s %s: %s(not timed)\n", c.routine.c_str(), b.c_str(),
                   c.dtype.c_str(), base.shape.c_str(), failures.c_str());
      finish("refcheck_failed", routine->ChecksDraws() ? "draws invalid or not reproducible; not timed"
                                                       : "output differs from the reference backend; not timed");
      continue;
    }
    if (Status s = Time(fn, *spec, &row); !s.ok()) {
      finish("error", row.message + s.message());
      continue;
    }
    if (!row.message.empty()) row.message = c.origin + ": " + row.message;
    rows.push_back(row);
  }
  // Free the case's memory before the next one allocates its own.
  sets_.clear();
  pool_ = DeviceMemory();
  return rows;
}

}  // namespace kiln::bench
