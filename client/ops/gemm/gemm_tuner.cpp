// kiln::tune::gemm (kiln/tune.h): times the candidate tactics of one gemm shape on the caller's
// GPU and stores the fastest correct one for the shape's bucket.
//
// Per candidate (GemmTuneCandidates; the blocklists apply first): d poisoned, warm-up calls
// (the first compiles and loads it), d compared with the heuristic tactic's result (a wrong
// result fails the candidate), then `iterations` calls each between two CUDA events on the
// caller's stream with the L2 flushed before each (a memset of twice its size, outside the
// events): the median is the candidate's time. CUDA events rather than %globaltimer: every
// candidate is a separate kernel launch of at least a few microseconds, which events resolve to
// ~0.5 us; the events are polled with a deadline so that a hung candidate stops the tuning with
// an error instead of blocking the process forever.
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
#include "client/ops/gemm/gemm_ops.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/gemm_tactic_controls.h"
#include "client/ops/gemm/gemm_tuning.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/tune.h"

namespace kiln::client {
namespace {

constexpr const char* kApi = "kiln::tune::gemm";
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
Status WaitFor(const CudaDriver& driver, CUevent event, double limit_ms, const std::string& tactic) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(limit_ms);
  while (true) {
    const CUresult r = driver.cuEventQuery(event);
    if (r == CUDA_SUCCESS) return OkStatus();
    if (r != CUDA_ERROR_NOT_READY) return driver.Check(r, "cuEventQuery after gemm tactic " + tactic);
    if (std::chrono::steady_clock::now() > deadline)
      return Status(StatusCode::kDeadlineExceeded,
                    std::string(kApi) + ": gemm tactic " + tactic + " did not finish within " +
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
std::string Mismatch(const GemmPlan& plan, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  const double rel = plan.out_dtype == DType::kFloat32 ? 2e-5 : plan.out_dtype == DType::kFloat16 ? 2e-3 : 1.6e-2;
  double scale = 0;
  for (int64_t r = 0; r < plan.m; ++r)
    for (int64_t j = 0; j < plan.n; ++j)
      scale = std::max(scale,
                       std::fabs(ElementOf(want, static_cast<size_t>(r * plan.d_row_stride + j), plan.out_dtype)));
  for (int64_t r = 0; r < plan.m; ++r) {
    for (int64_t j = 0; j < plan.n; ++j) {
      const size_t i = static_cast<size_t>(r * plan.d_row_stride + j);
      const double x = ElementOf(got, i, plan.out_dtype), y = ElementOf(want, i, plan.out_dtype);
      if (!(std::fabs(x - y) <= 2 * rel * std::max(std::fabs(x), std::fabs(y)) + 1e-4 * scale))
        return "wrong result against the heuristic's tactic: d[" + std::to_string(r) + ", " + std::to_string(j) +
               "] = " + std::to_string(x) + ", expected " + std::to_string(y);
    }
  }
  return "";
}

}  // namespace

// kiln::tune::gemm's body (below, in the public namespace).
StatusOr<tune::Report> TuneGemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                const tune::Options& options, void* stream_ptr);

StatusOr<tune::Report> TuneGemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                const tune::Options& options, void* stream_ptr) {
  if (options.warmup < 1 || options.iterations < 1 || !(options.max_call_ms > 0))
    return InvalidArgument(std::string(kApi) +
                           ": options: warmup and iterations must be at least 1 and max_call_ms "
                           "positive, found " +
                           std::to_string(options.warmup) + ", " + std::to_string(options.iterations) + ", " +
                           std::to_string(options.max_call_ms));
  KILN_ASSIGN_OR_RETURN(const GemmPlan plan, PlanGemm(d, a, b, nullptr, nullptr, 1.0, kApi));
  if (plan.m == 0) return InvalidArgument(std::string(kApi) + ": a has no rows: there is nothing to time");
  const auto started = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Get());
  KILN_ASSIGN_OR_RETURN(const GemmDeviceFacts* device, GemmFactsOf(*driver, plan.device));
  const StatusOr<GemmTacticControls>& controls = GemmTacticControlsFromEnvironment();
  if (!controls.ok()) return controls.status().WithContext(kApi);
  const std::shared_ptr<const GemmTuningContext> context = GemmTuningContextFor(plan.device);
  KILN_ASSIGN_OR_RETURN(const ChosenGemmTactic heuristic, GemmTacticOfCall(plan, /*skip_tuned=*/true));
  CUstream stream = static_cast<CUstream>(stream_ptr);

  tune::Report report;
  report.op = gemm::kGemmOp;
  report.bucket = GemmTuningBucket(plan.dtype, plan.out_dtype, plan.m, plan.n, plan.k);
  report.heuristic = GemmTacticText(heuristic.tactic);
  report.timing = kTiming;

  // d's span, the heuristic's result, and the L2 flush buffer.
  const size_t es = DTypeSize(plan.out_dtype);
  const size_t d_bytes = static_cast<size_t>((plan.m - 1) * plan.d_row_stride + plan.n) * es;
  const CUdeviceptr d_ptr = reinterpret_cast<CUdeviceptr>(plan.d);
  CUdevice cu_device = 0;
  KILN_RETURN_IF_ERROR(driver->Check(driver->cuDeviceGet(&cu_device, plan.device), "cuDeviceGet"));
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
  KILN_RETURN_IF_ERROR(LaunchGemmPlan(plan, heuristic.tactic, stream));
  KILN_RETURN_IF_ERROR(download(&want));

  std::vector<gemm::GemmTactic> candidates = {heuristic.tactic};
  for (const gemm::GemmTactic& t : GemmTuneCandidates(plan.m, plan.n, plan.k, device->sms)) {
    if (GemmTacticBlocked(gemm::kGemmOp, t, *controls, *device, *context)) continue;
    if (GemmTacticText(t) != report.heuristic) candidates.push_back(t);
  }

  auto time_one = [&](const gemm::GemmTactic& tactic) -> StatusOr<tune::Candidate> {
    tune::Candidate c;
    c.tactic = GemmTacticText(tactic);
    KILN_RETURN_IF_ERROR(poison());
    for (int i = 0; i < options.warmup; ++i) {
      const Status s = LaunchGemmPlan(plan, tactic, stream);
      if (!s.ok()) {
        c.failure = s.ToString();
        return c;
      }
    }
    KILN_ASSIGN_OR_RETURN(CUevent done, events.Make());
    KILN_RETURN_IF_ERROR(driver->Check(driver->cuEventRecord(done, stream), "cuEventRecord"));
    KILN_RETURN_IF_ERROR(WaitFor(*driver, done, 10 * options.max_call_ms * options.warmup, c.tactic));
    KILN_RETURN_IF_ERROR(download(&got));
    if (std::string why = Mismatch(plan, got, want); !why.empty()) {
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
      const Status s = LaunchGemmPlan(plan, tactic, stream);
      if (!s.ok()) {
        c.failure = s.ToString();
        return c;
      }
      KILN_RETURN_IF_ERROR(driver->Check(driver->cuEventRecord(end, stream), "cuEventRecord"));
      KILN_RETURN_IF_ERROR(WaitFor(*driver, end, 10 * options.max_call_ms, c.tactic));
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

  for (const gemm::GemmTactic& t : candidates) {
    KILN_ASSIGN_OR_RETURN(tune::Candidate c, time_one(t));
    report.candidates.push_back(std::move(c));
  }
  // The winner's neighbours: its other raster groups and one stage fewer.
  const tune::Candidate* best = nullptr;
  for (const tune::Candidate& c : report.candidates)
    if (c.ok && (best == nullptr || c.median_us < best->median_us)) best = &c;
  if (best == nullptr)
    return Status(StatusCode::kInternal, std::string(kApi) + ": no candidate ran correctly; the first failed with: " +
                                             report.candidates.front().failure);
  KILN_ASSIGN_OR_RETURN(const gemm::GemmTactic winner, ParseGemmTactic(best->tactic));
  std::vector<gemm::GemmTactic> neighbours;
  for (int group_m : {1, 4, 16})
    if (group_m != winner.group_m)
      neighbours.push_back({winner.tile_m, winner.tile_n, winner.stages, group_m, winner.split_k});
  if (winner.stages > gemm::kMinStages)
    neighbours.push_back({winner.tile_m, winner.tile_n, winner.stages - 1, winner.group_m, winner.split_k});
  for (const gemm::GemmTactic& t : neighbours) {
    if (!gemm::GemmTacticFits(t) || GemmTacticBlocked(gemm::kGemmOp, t, *controls, *device, *context)) continue;
    const std::string text = GemmTacticText(t);
    if (std::any_of(report.candidates.begin(), report.candidates.end(),
                    [&](const tune::Candidate& c) { return c.tactic == text; }))
      continue;
    KILN_ASSIGN_OR_RETURN(tune::Candidate c, time_one(t));
    report.candidates.push_back(std::move(c));
  }
  for (const tune::Candidate& c : report.candidates) {
    if (c.tactic == report.heuristic && c.ok) report.heuristic_us = c.median_us;
    if (c.ok && (report.chosen.empty() || c.median_us < report.chosen_us)) {
      report.chosen = c.tactic;
      report.chosen_us = c.median_us;
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  if (!options.store) {
    report.stored_to = "nowhere: Options::store is false";
  } else if (!context->ok) {
    report.stored_to = "nowhere: " + context->why_not;
  } else {
    TuningRecord record;
    record.set_op(gemm::kGemmOp);
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

namespace kiln::tune {

StatusOr<Report> gemm(const TensorView& d, const TensorView& a, const TensorView& b, const Options& options,
                      void* stream) {
  return client::TuneGemm(d, a, b, options, stream);
}

}  // namespace kiln::tune
