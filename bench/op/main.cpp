// kiln-bench: the unified benchmark of Kiln's ops (docs/benchmarking.md). Every case is
// checked against the reference backend before anything is timed; the rows say how each
// figure was measured. Needs a GPU and a running kilnd; without a GPU it exits with 77.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench/op/bench_device.h"
#include "bench/op/bench_options.h"
#include "bench/op/call_overhead.h"
#include "bench/op/case_runner.h"
#include "bench/op/default_list.h"
#include "bench/op/result_row.h"
#include "bench/op/routine.h"
#include "bench/op/stream_gate.h"
#include "bench/op/timer.h"
#include "client/core/driver/cuda_driver.h"
#include "kiln/client.h"

namespace {

using namespace kiln;
using namespace kiln::bench;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoGpu = 77;

int Fail(const std::string& message, int code = kExitFailed) {
  std::fprintf(stderr, "kiln-bench: %s\n", message.c_str());
  return code;
}

std::string UtcNow() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

int ListRoutines() {
  for (const Routine* r : RoutineRegistry::Global().All()) {
    std::string axes, dtypes;
    for (const auto& a : r->axes()) axes += (axes.empty() ? "" : ",") + a + "=N";
    for (DType d : r->dtypes()) dtypes += (dtypes.empty() ? "" : ",") + std::string(DTypeName(d));
    std::printf("%s: %s\n  --shapes %s   --dtype %s\n  backends:\n", std::string(r->name()).c_str(),
                std::string(r->description()).c_str(), axes.c_str(), dtypes.c_str());
    for (const auto& b : r->backends()) std::printf("    %-12s %s\n", b.name.c_str(), b.help.c_str());
  }
  return 0;
}

int GenerateList(const BenchOptions& options) {
  auto text = GenerateDefaultListFromDir(options.traces_dir);
  if (!text.ok()) return Fail(text.status().message());
  if (options.outs.empty()) {
    std::fputs(text->c_str(), stdout);
    return 0;
  }
  std::ofstream out(options.outs[0], std::ios::binary | std::ios::trunc);
  out << *text;
  out.close();
  if (!out) return Fail("cannot write " + options.outs[0]);
  return 0;
}

// The device and the daemon both modes measure with: the device (or the exit code that says
// why there is none: 77 without a GPU) and a reachable kilnd.
int OpenDeviceAndDaemon(const BenchOptions& options, std::unique_ptr<BenchDevice>* device) {
  auto opened = BenchDevice::Open(options.device);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kNoDriver) {
      std::fprintf(stderr, "kiln-bench: SKIPPED: no GPU: %s\n", opened.status().message().c_str());
      return kExitNoGpu;
    }
    return Fail(opened.status().message());
  }
  *device = std::move(opened).value();
  ClientOptions client = CurrentOptions();
  if (!options.socket.empty()) client.socket = options.socket;
  if (Status s = Configure(client); !s.ok()) return Fail(s.ToString());
  if (Status s = Ping(std::chrono::seconds(10)); !s.ok()) return Fail("kilnd: " + s.ToString());
  return 0;
}

int Run(const BenchOptions& options, const std::string& command_line) {
  std::vector<BenchCase> cases;
  if (options.mode == BenchMode::kList) {
    std::ifstream in(options.list_file, std::ios::binary);
    if (!in) return Fail("--list " + options.list_file + ": cannot read the file", kExitUsage);
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = ParseTestList(text.str(), options.list_file);
    if (!parsed.ok()) return Fail(parsed.status().message(), kExitUsage);
    cases = std::move(*parsed);
  } else if (options.mode == BenchMode::kTraces) {
    auto text = GenerateDefaultListFromDir(options.traces_dir);
    if (!text.ok()) return Fail(text.status().message(), kExitUsage);
    auto parsed = ParseTestList(*text, options.traces_dir);
    if (!parsed.ok()) return Fail(parsed.status().message(), kExitUsage);
    cases = std::move(*parsed);
  } else {
    cases = CommandLineCases(options);
  }

  // A GPU first: without one there is nothing to measure, and that is a skip, not a failure.
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) {
    std::fprintf(stderr, "kiln-bench: SKIPPED: no GPU: %s\n", driver.status().message().c_str());
    return kExitNoGpu;
  }
  // CUPTI before the context exists, as its activity API prefers.
  Status cupti = options.timer == TimerChoice::kEvents
                     ? Status(StatusCode::kUnavailable, "not asked for (--timer events)")
                     : StartCupti();
  if (options.timer == TimerChoice::kCupti && !cupti.ok()) return Fail("--timer cupti: " + cupti.message());
  std::unique_ptr<BenchDevice> device;
  if (int code = OpenDeviceAndDaemon(options, &device); code != 0) return code;
  BenchDevice& d = *device;

  auto gate = StreamGate::Create(d);
  if (!gate.ok()) return Fail(gate.status().ToString());
  std::unique_ptr<Timer> events = MakeEventTimer(d, **gate);
  std::unique_ptr<Timer> cupti_timer;
  if (cupti.ok()) {
    auto t = MakeCuptiTimer(d, **gate);
    if (t.ok()) cupti_timer = std::move(*t);
    else cupti = t.status();
  }
  if (!cupti.ok() && options.timer == TimerChoice::kAuto)
    std::fprintf(stderr, "kiln-bench: timing with CUDA events: %s\n", cupti.message().c_str());

  auto copy = MeasureCopyBandwidth(d, cupti_timer ? *cupti_timer : *events);
  if (!copy.ok() && cupti_timer) copy = MeasureCopyBandwidth(d, *events);
  if (!copy.ok()) return Fail("device-to-device copy baseline: " + copy.status().ToString());

  if (!options.quiet) {
    std::printf("# %s (%s, %d SMs, L2 %zu MB), driver for CUDA %s; kilnd %s\n", d.info().name.c_str(), d.arch().c_str(),
                d.info().multiprocessors, d.l2_bytes() >> 20, client::CudaVersionString(d.driver().version()).c_str(),
                DaemonTarget().c_str());
    std::printf("# timer: %s; L2: %s; device-to-device copy: %.0f GB/s (%zu MiB, %.1f us); read-only: %.0f GB/s "
                "(%.1f us)\n",
                cupti_timer ? "cupti_activity" : "cuda_events", L2ModeName(options.l2), copy->gbps, copy->bytes >> 20,
                copy->median_us, copy->read_gbps, copy->read_us);
    std::printf("%s\n", TableHeader().c_str());
  }

  CaseRunner runner(options, d, cupti_timer.get(), *events, *copy);
  std::vector<ResultRow> rows;
  int failed = 0, skipped = 0;
  for (const auto& c : cases) {
    for (auto& row : runner.Run(c)) {
      if (!options.quiet) std::printf("%s\n", RowToTableLine(row).c_str());
      std::fflush(stdout);
      if (row.status == "skipped") ++skipped;
      else if (row.status != "ok") ++failed;
      rows.push_back(std::move(row));
    }
  }

  nlohmann::json meta = {
      {"tool", "kiln-bench"},
      {"kiln_version", Version()},
      {"date", UtcNow()},
      {"command", command_line},
      {"gpu", d.info().name},
      {"arch", d.arch()},
      {"multiprocessors", d.info().multiprocessors},
      {"l2_bytes", d.l2_bytes()},
      {"memory_bytes", d.info().total_memory},
      {"driver_cuda_version", client::CudaVersionString(d.driver().version())},
      {"daemon", DaemonTarget()},
      {"timer",
       {{"requested", TimerChoiceName(options.timer)}, {"cupti", cupti.ok() ? std::string("used") : cupti.message()}}},
      {"l2", L2ModeName(options.l2)},
      {"iters", options.iters},
      {"warmup", options.warmup},
      {"max_seconds", options.max_seconds},
      {"seed", options.seed},
      {"copy_baseline",
       {{"bytes", copy->bytes},
        {"median_us", copy->median_us},
        {"gbps", copy->gbps},
        {"mechanism", copy->mechanism},
        {"what", copy->what + "; GB/s counts read + write"}}},
      {"read_baseline",
       {{"bytes", copy->bytes},
        {"median_us", std::isfinite(copy->read_us) ? nlohmann::json(copy->read_us) : nlohmann::json(nullptr)},
        {"gbps", std::isfinite(copy->read_gbps) ? nlohmann::json(copy->read_gbps) : nlohmann::json(nullptr)},
        {"what", "read-only kernel (16-byte streaming loads); GB/s counts the bytes read"}}},
  };
  if (options.mode == BenchMode::kList) meta["list"] = options.list_file;
  if (options.mode == BenchMode::kTraces) meta["traces"] = options.traces_dir;
  for (const auto& out : options.outs)
    if (Status s = WriteRows(out, meta, rows); !s.ok()) return Fail(s.message());

  std::printf("# %zu rows: %zu ok, %d failed, %d skipped\n", rows.size(), rows.size() - failed - skipped, failed,
              skipped);
  return failed > 0 ? kExitFailed : 0;
}

// kiln-bench --overhead: the op-call overhead rows (call_overhead.h). No CUPTI: its activity
// records would slow down every launch this measures.
int Overhead(const BenchOptions& options, const std::string& command_line) {
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) {
    std::fprintf(stderr, "kiln-bench: SKIPPED: no GPU: %s\n", driver.status().message().c_str());
    return kExitNoGpu;
  }
  std::unique_ptr<BenchDevice> device;
  if (int code = OpenDeviceAndDaemon(options, &device); code != 0) return code;
  BenchDevice& d = *device;

  if (!options.quiet) {
    std::printf("# %s (%s), driver for CUDA %s; kilnd %s\n", d.info().name.c_str(), d.arch().c_str(),
                client::CudaVersionString(d.driver().version()).c_str(), DaemonTarget().c_str());
    std::printf("# op-call overhead: host time per call, %d batches of %d calls per backend (%d untimed first); %s\n",
                options.iters, kOverheadCallsPerBatch, options.warmup, LoggingState().c_str());
    std::printf("%s %10s\n", TableHeader().c_str(), "vs raw us");
  }
  const std::vector<ResultRow> rows = MeasureCallOverhead(options, d);
  int failed = 0;
  for (const auto& row : rows) {
    if (row.status != "ok") ++failed;
    if (!options.quiet && row.status == "ok") std::printf("%s %+10.3f\n", RowToTableLine(row).c_str(), row.overhead_us);
    else if (!options.quiet) std::printf("%s\n", RowToTableLine(row).c_str());
    if (row.backend == "kiln" && row.status == "ok") std::printf("# %s: %s\n", row.label.c_str(), row.message.c_str());
  }
  nlohmann::json meta = {
      {"tool", "kiln-bench"},
      {"mode", "overhead"},
      {"kiln_version", Version()},
      {"date", UtcNow()},
      {"command", command_line},
      {"gpu", d.info().name},
      {"arch", d.arch()},
      {"driver_cuda_version", client::CudaVersionString(d.driver().version())},
      {"daemon", DaemonTarget()},
      {"timer", "host steady_clock around each call; cupti not started"},
      {"calls_per_batch", kOverheadCallsPerBatch},
      {"batches", options.iters},
      {"warmup_batches", options.warmup},
      {"seed", options.seed},
      {"logging", LoggingState()},
  };
  for (const auto& out : options.outs)
    if (Status s = WriteRows(out, meta, rows); !s.ok()) return Fail(s.message());
  std::printf("# %zu rows: %zu ok, %d failed\n", rows.size(), rows.size() - failed, failed);
  return failed > 0 ? kExitFailed : 0;
}

// kiln-bench --check: the GPU correctness check of every op, from its routine alone (docs/
// adding-a-kernel.md): every backend, dtype and check shape against float64 on the CPU.
int Check(const BenchOptions& options) {
  auto driver = client::CudaDriver::Get();
  if (!driver.ok()) {
    std::fprintf(stderr, "kiln-bench: SKIPPED: no GPU: %s\n", driver.status().message().c_str());
    return kExitNoGpu;
  }
  std::unique_ptr<BenchDevice> device;
  if (int code = OpenDeviceAndDaemon(options, &device); code != 0) return code;
  BenchDevice& d = *device;
  auto gate = StreamGate::Create(d);
  if (!gate.ok()) return Fail(gate.status().ToString());
  std::unique_ptr<Timer> events = MakeEventTimer(d, **gate);
  CaseRunner runner(options, d, nullptr, *events, CopyBaseline{});
  std::printf("# %s (%s); kilnd %s; seed %llu\n", d.info().name.c_str(), d.arch().c_str(), DaemonTarget().c_str(),
              static_cast<unsigned long long>(options.seed));
  int checks = 0, failed = 0, not_applicable = 0;
  for (const std::string& name : options.only)
    if (RoutineRegistry::Global().Find(name) == nullptr)
      return Fail("--only: no routine '" + name + "' (see --list-routines)");
  for (const Routine* routine : RoutineRegistry::Global().All()) {
    if (!options.only.empty() &&
        std::find(options.only.begin(), options.only.end(), std::string(routine->name())) == options.only.end())
      continue;
    for (DType dtype : routine->dtypes()) {
      for (const BackendInfo& backend : routine->backends()) {
        for (const ShapeAxes& shape : routine->CheckShapes()) {
          const CaseRunner::CheckedReference r = runner.CheckOnCpu(*routine, backend.name, dtype, shape);
          const std::string what = std::string(routine->name()) + " " + DTypeName(dtype) + " " + backend.name + " " +
                                   FormatShape(shape);
          ++checks;
          if (r.status.ok()) {
            std::printf("pass  %s: %s\n", what.c_str(), r.detail.c_str());
          } else if (r.not_applicable) {
            ++not_applicable;
            std::printf("n/a   %s: %s\n", what.c_str(), r.status.message().c_str());
          } else {
            ++failed;
            std::printf("FAIL  %s: %s\n", what.c_str(), r.status.ToString().c_str());
          }
          std::fflush(stdout);
        }
      }
    }
  }
  std::printf("# %d checks: %d passed, %d failed, %d not applicable (the backend does not take the case)\n", checks,
              checks - failed - not_applicable, failed, not_applicable);
  return failed > 0 ? kExitFailed : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string command_line = "kiln-bench";
  for (const auto& a : args) command_line += " " + a;
  auto options = ParseBenchOptions(args);
  if (!options.ok()) return Fail(options.status().message() + "\n(kiln-bench --help shows the usage)", kExitUsage);
  switch (options->mode) {
    case BenchMode::kHelp: std::fputs(BenchUsage().c_str(), stdout); return 0;
    case BenchMode::kListRoutines: return ListRoutines();
    case BenchMode::kGenerateList: return GenerateList(*options);
    case BenchMode::kOverhead: return Overhead(*options, command_line);
    case BenchMode::kCheck: return Check(*options);
    case BenchMode::kRun:
    case BenchMode::kList:
    case BenchMode::kTraces: return Run(*options, command_line);
  }
  return kExitUsage;
}
