#include "client/ops/gemm/tactic_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "client/core/api/float16.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/tuning/tuning_records.h"
#include "client/ops/gemm/gemm_launch.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
#include "client/ops/gemm/gemm_tuning.h"

namespace kiln::client {
namespace {

constexpr const char* kTiming = "cuda_events_l2_flushed";

// A device buffer freed when it goes out of scope.
class Scratch {
 public:
  Scratch(const CudaDriver& driver) : driver_(driver) {}
  ~Scratch() {
    if (ptr_ != 0) driver_.cuMemFree(ptr_);
  }
  Status Allocate(size_t bytes, const char* what) {
    return driver_.Check(driver_.cuMemAlloc(&ptr_, bytes), std::string("cuMemAlloc of the tuner's ") + what);
  }
  CUdeviceptr get() const { return ptr_; }

 private:
  const CudaDriver& driver_;
  CUdeviceptr ptr_ = 0;
};

class Events {
 public:
  Events(const CudaDriver& driver) : driver_(driver) {}
  ~Events() {
    for (CUevent e : events_) driver_.cuEventDestroy(e);
  }
  StatusOr<CUevent> Make() {
    CUevent e = nullptr;
    KILN_RETURN_IF_ERROR(driver_.Check(driver_.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate"));
    events_.push_back(e);
    return e;
  }

 private:
  const CudaDriver& driver_;
  std::vector<CUevent> events_;
};

// Waits for `event` for at most `limit_ms`; DEADLINE_EXCEEDED naming the tactic after that.
Status WaitFor(const CudaDriver& driver, CUevent event, double limit_ms, const TacticTuneJob& job,
               const std::string& tactic) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(limit_ms);
  while (true) {
    const CUresult r = driver.cuEventQuery(event);
    if (r == CUDA_SUCCESS) return OkStatus();
    if (r != CUDA_ERROR_NOT_READY)
      return driver.Check(r, std::string("cuEventQuery after ") + job.op + " tactic " + tactic);
    if (std::chrono::steady_clock::now() > deadline)
      return Status(StatusCode::kDeadlineExceeded,
                    std::string(job.api) + ": " + job.op + " tactic " + tactic + " did not finish within " +
                        std::to_string(static_cast<int>(limit_ms)) +
                        " ms; the GPU may still be running it (block it: KILN_TACTIC_BLOCKLIST or kilnd "
                        "--tactic-blocklist)");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

double ElementOf(const std::vector<uint8_t>& bytes, size_t i, DType dtype) {
  if (dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, bytes.data() + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + i * 2, 2);
  return dtype == DType::kBFloat16 ? BFloat16ToFloat(h) : HalfToFloat(h);
}

// "" when `got` matches `want` (both d's span) within two roundings of d's dtype plus fp32
// accumulation noise (another tactic sums K in another order); else the first difference.
// Elements equal to the byte (poison no launch overwrote in either) match.
std::string Mismatch(const TacticTuneJob& job, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  const DType dt = job.out_dtype;
  const size_t es = DTypeSize(dt);
  const double rel = dt == DType::kFloat32 ? 2e-5 : dt == DType::kFloat16 ? 2e-3 : 1.6e-2;
  double scale = 0;
  for (int64_t r = 0; r < job.rows; ++r)
    for (int64_t j = 0; j < job.cols; ++j) {
      const double y = std::fabs(ElementOf(want, static_cast<size_t>(r * job.row_stride + j), dt));
      if (std::isfinite(y)) scale = std::max(scale, y);
    }
  for (int64_t r = 0; r < job.rows; ++r) {
    for (int64_t j = 0; j < job.cols; ++j) {
      const size_t i = static_cast<size_t>(r * job.row_stride + j);
      if (std::memcmp(got.data() + i * es, want.data() + i * es, es) == 0) continue;
      const double x = ElementOf(got, i, dt), y = ElementOf(want, i, dt);
      if (!(std::fabs(x - y) <= 2 * rel * std::max(std::fabs(x), std::fabs(y)) + 1e-4 * scale))
        return "wrong result against the heuristic's tactic: d[" + std::to_string(r) + ", " + std::to_string(j) +
               "] = " + std::to_string(x) + ", expected " + std::to_string(y);
    }
  }
  return "";
}

}  // namespace

std::vector<gemm::GemmTactic> SpaceTuneCandidates(std::string_view op) {
  std::vector<gemm::GemmTactic> out;
  for (auto [tile_m, tile_n] : gemm::kGemmTilesInOrder)
    for (int stages = gemm::kMaxStages; stages >= gemm::kMinStages; --stages) {
      const gemm::GemmTactic t{tile_m, tile_n, stages, 8, 1};
      if (TacticInSpace(op, t)) {
        out.push_back(t);
        break;
      }
    }
  return out;
}

Status CheckTuneOptions(const char* api, const tune::Options& options) {
  if (options.warmup < 1 || options.iterations < 1 || !(options.max_call_ms > 0))
    return InvalidArgument(std::string(api) +
                           ": options: warmup and iterations must be at least 1 and max_call_ms "
                           "positive, found " +
                           std::to_string(options.warmup) + ", " + std::to_string(options.iterations) + ", " +
                           std::to_string(options.max_call_ms));
  return OkStatus();
}

StatusOr<tune::Report> RunTacticTuning(const TacticTuneJob& job, const tune::Options& options, void* stream_ptr) {
  KILN_RETURN_IF_ERROR(CheckTuneOptions(job.api, options));
  const auto started = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Get());
  KILN_ASSIGN_OR_RETURN(const GemmDeviceFacts* device, GemmFactsOf(*driver, job.device));
  const StatusOr<GemmTacticControls>& controls = GemmTacticControlsFromEnvironment();
  if (!controls.ok()) return controls.status().WithContext(job.api);
  const std::shared_ptr<const GemmTuningContext> context = GemmTuningContextFor(job.device);
  CUstream stream = static_cast<CUstream>(stream_ptr);
  auto text = [&](const gemm::GemmTactic& t) { return GemmTacticText(t, job.op); };

  tune::Report report;
  report.op = job.op;
  report.bucket = job.bucket;
  report.heuristic = text(job.heuristic);
  report.timing = kTiming;

  // d's span, the heuristic's result, and the L2 flush buffer.
  const size_t d_bytes = static_cast<size_t>((job.rows - 1) * job.row_stride + job.cols) * DTypeSize(job.out_dtype);
  const CUdeviceptr d_ptr = reinterpret_cast<CUdeviceptr>(job.d);
  CUdevice cu_device = 0;
  KILN_RETURN_IF_ERROR(driver->Check(driver->cuDeviceGet(&cu_device, job.device), "cuDeviceGet"));
  int l2 = 0;
  KILN_RETURN_IF_ERROR(driver->Check(driver->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, cu_device),
                                     "cuDeviceGetAttribute(L2)"));
  const size_t flush_bytes = static_cast<size_t>(std::max(l2, 1 << 20)) * 2;
  Scratch flush(*driver);
  KILN_RETURN_IF_ERROR(flush.Allocate(flush_bytes, "L2 flush buffer"));
  Events events(*driver);
  std::vector<uint8_t> want(d_bytes), got(d_bytes);

  auto download = [&](std::vector<uint8_t>* out) -> Status {
    KILN_RETURN_IF_ERROR(driver->Check(driver->cuStreamSynchronize(stream), "cuStreamSynchronize"));
    return driver->Check(driver->cuMemcpyDtoH(out->data(), d_ptr, d_bytes), "cuMemcpyDtoH of d");
  };
  auto poison = [&]() { return driver->Check(driver->cuMemsetD8Async(d_ptr, 0xFF, d_bytes, stream), "poison d"); };

  // The heuristic's result is the reference every candidate must match.
  KILN_RETURN_IF_ERROR(poison());
  KILN_RETURN_IF_ERROR(job.launch(job.heuristic, stream));
  KILN_RETURN_IF_ERROR(download(&want));

  auto usable = [&](const gemm::GemmTactic& t) {
    return TacticInSpace(job.op, t) && !GemmTacticBlocked(job.op, t, *controls, *device, *context);
  };
  auto tried = [&](const std::string& tactic) {
    return std::any_of(report.candidates.begin(), report.candidates.end(),
                       [&](const tune::Candidate& c) { return c.tactic == tactic; });
  };

  auto time_one = [&](const gemm::GemmTactic& tactic) -> StatusOr<tune::Candidate> {
    tune::Candidate c;
    c.tactic = text(tactic);
    KILN_RETURN_IF_ERROR(poison());
    for (int i = 0; i < options.warmup; ++i) {
      const Status s = job.launch(tactic, stream);
      if (!s.ok()) {
        c.failure = s.ToString();
        return c;
      }
    }
    KILN_ASSIGN_OR_RETURN(CUevent done, events.Make());
    KILN_RETURN_IF_ERROR(driver->Check(driver->cuEventRecord(done, stream), "cuEventRecord"));
    KILN_RETURN_IF_ERROR(WaitFor(*driver, done, 10 * options.max_call_ms * options.warmup, job, c.tactic));
    KILN_RETURN_IF_ERROR(download(&got));
    if (std::string why = Mismatch(job, got, want); !why.empty()) {
      c.failure = why;
      return c;
    }
    std::vector<double> ms;
    for (int i = 0; i < options.iterations; ++i) {
      KILN_RETURN_IF_ERROR(driver->Check(
          driver->cuMemsetD8Async(flush.get(), static_cast<unsigned char>(i), flush_bytes, stream), "the L2 flush"));
      KILN_ASSIGN_OR_RETURN(CUevent start, events.Make());
      KILN_ASSIGN_OR_RETURN(CUevent end, events.Make());
      KILN_RETURN_IF_ERROR(driver->Check(driver->cuEventRecord(start, stream), "cuEventRecord"));
      const Status s = job.launch(tactic, stream);
      if (!s.ok()) {
        c.failure = s.ToString();
        return c;
      }
      KILN_RETURN_IF_ERROR(driver->Check(driver->cuEventRecord(end, stream), "cuEventRecord"));
      KILN_RETURN_IF_ERROR(WaitFor(*driver, end, 10 * options.max_call_ms, job, c.tactic));
      float elapsed = 0;
      KILN_RETURN_IF_ERROR(driver->Check(driver->cuEventElapsedTime(&elapsed, start, end), "cuEventElapsedTime"));
      ms.push_back(elapsed);
    }
    std::sort(ms.begin(), ms.end());
    const double median_ms = ms.size() % 2 == 1 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
    if (median_ms > options.max_call_ms) {
      c.failure = "exceeds the time limit: median " + std::to_string(median_ms) + " ms > " +
                  std::to_string(options.max_call_ms) + " ms";
      return c;
    }
    c.ok = true;
    c.median_us = median_ms * 1000.0;
    return c;
  };
  auto time_if_new = [&](const gemm::GemmTactic& t) -> Status {
    if (!usable(t) || tried(text(t))) return OkStatus();
    KILN_ASSIGN_OR_RETURN(tune::Candidate c, time_one(t));
    report.candidates.push_back(std::move(c));
    return OkStatus();
  };

  // The heuristic's tactic is timed even when a blocklist names it: the call that asked for the
  // tuning just ran it (a blocked heuristic is never chosen: see below).
  KILN_ASSIGN_OR_RETURN(tune::Candidate first, time_one(job.heuristic));
  report.candidates.push_back(std::move(first));
  for (const gemm::GemmTactic& t : job.candidates) KILN_RETURN_IF_ERROR(time_if_new(t));

  // The winner's neighbours: its other raster groups and one stage fewer.
  auto best_of = [&](bool unblocked_only) {
    const tune::Candidate* best = nullptr;
    for (const tune::Candidate& c : report.candidates) {
      if (!c.ok || (best != nullptr && c.median_us >= best->median_us)) continue;
      if (unblocked_only) {
        auto parsed = ParseGemmTactic(c.tactic, job.op);
        if (!parsed.ok() || !usable(*parsed)) continue;
      }
      best = &c;
    }
    return best;
  };
  const tune::Candidate* best = best_of(true);
  if (best == nullptr)
    return Status(StatusCode::kInternal, std::string(job.api) +
                                             ": no usable candidate ran correctly; the first failed with: " +
                                             (report.candidates.front().ok ? std::string("(it is blocked here)")
                                                                           : report.candidates.front().failure));
  KILN_ASSIGN_OR_RETURN(const gemm::GemmTactic winner, ParseGemmTactic(best->tactic, job.op));
  std::vector<gemm::GemmTactic> neighbours;
  for (int group_m : {1, 4, 16})
    if (group_m != winner.group_m)
      neighbours.push_back({winner.tile_m, winner.tile_n, winner.stages, group_m, winner.split_k, winner.multicast});
  if (winner.stages > gemm::kMinStages)
    neighbours.push_back(
        {winner.tile_m, winner.tile_n, winner.stages - 1, winner.group_m, winner.split_k, winner.multicast});
  for (const gemm::GemmTactic& t : neighbours) KILN_RETURN_IF_ERROR(time_if_new(t));

  for (const tune::Candidate& c : report.candidates)
    if (c.tactic == report.heuristic && c.ok) report.heuristic_us = c.median_us;
  best = best_of(true);
  report.chosen = best->tactic;
  report.chosen_us = best->median_us;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  if (!options.store) {
    report.stored_to = "nowhere: Options::store is false";
  } else if (!context->ok) {
    report.stored_to = "nowhere: " + context->why_not;
  } else {
    TuningRecord record;
    record.set_op(job.op);
    record.set_bucket(report.bucket);
    *record.mutable_environment() = context->environment;
    record.set_tactic(report.chosen);
    record.set_median_us(report.chosen_us);
    record.set_timing(report.timing);
    for (const tune::Candidate& c : report.candidates) {
      v1::TuningCandidate* out = record.add_candidates();
      out->set_tactic(c.tactic);
      out->set_ok(c.ok);
      if (c.ok) out->set_median_us(c.median_us);
      else out->set_failure(c.failure.substr(0, 1000));
    }
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    record.mutable_recorded()->set_seconds(std::chrono::duration_cast<std::chrono::seconds>(now).count());
    KILN_RETURN_IF_ERROR(StoreTuning(record));
    BumpGemmTuningGeneration();
    auto where = TuningStoreDescription();
    report.stored_to = where.ok() ? *where : where.status().ToString();
  }
  return report;
}

}  // namespace kiln::client
