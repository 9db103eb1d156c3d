// The cupti_activity timer (timer.h): CUPTI's activity API through dlopen, compiled against
// the toolkit's CUPTI headers when the build finds them (KILN_BENCH_HAVE_CUPTI).
#include "bench/op/timer.h"

#include "bench/op/kernel_parts.h"

#ifdef KILN_BENCH_HAVE_CUPTI

#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace kiln::bench {
namespace {

struct CuptiApi {
  void* handle = nullptr;
  std::string path;
  decltype(&cuptiGetVersion) GetVersion = nullptr;
  decltype(&cuptiGetResultString) GetResultString = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) RegisterCallbacks = nullptr;
  decltype(&cuptiActivityEnable) Enable = nullptr;
  decltype(&cuptiActivityFlushAll) FlushAll = nullptr;
  decltype(&cuptiActivityGetNextRecord) GetNextRecord = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) PushExternalId = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) PopExternalId = nullptr;
};

CuptiApi& Api() {
  static CuptiApi api;
  return api;
}

std::string ResultText(CUptiResult r) {
  const char* text = nullptr;
  if (Api().GetResultString != nullptr && Api().GetResultString(r, &text) == CUPTI_SUCCESS && text != nullptr)
    return text;
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

Status Unavailable(const std::string& why) { return Status(StatusCode::kUnavailable, "CUPTI: " + why); }

// Device work CUPTI reported: one kernel, memcpy or memset, with the correlation id of the
// driver call that enqueued it.
struct DeviceWork {
  uint32_t correlation = 0;
  uint64_t start = 0, end = 0;  // ns
  std::string name;
};

struct Collector {
  std::mutex mu;
  std::vector<DeviceWork> work;
  std::unordered_map<uint32_t, uint64_t> external;  // correlation id -> our call id
};

Collector& Collected() {
  static Collector* c = new Collector();
  return *c;
}

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<DeviceWork> work;
  std::vector<std::pair<uint32_t, uint64_t>> external;
  CUpti_Activity* record = nullptr;
  while (valid > 0 && Api().GetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        work.push_back({k->correlationId, k->start, k->end, k->name != nullptr ? k->name : "kernel"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        work.push_back({m->correlationId, m->start, m->end, "memcpy"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        work.push_back({m->correlationId, m->start, m->end, "memset"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
          external.emplace_back(e->correlationId, e->externalId);
        break;
      }
      default: break;  // driver API records: only there so that the external correlations are made
    }
  }
  std::free(buffer);
  Collector& c = Collected();
  std::lock_guard<std::mutex> lock(c.mu);
  c.work.insert(c.work.end(), work.begin(), work.end());
  for (const auto& [correlation, id] : external) c.external[correlation] = id;
}

Status Start() {
  CuptiApi& api = Api();
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KILN_BENCH_CUPTI"); env != nullptr && *env != '\0') candidates.push_back(env);
  candidates.insert(candidates.end(), {"libcupti.so.13", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                                       "/usr/local/cuda/lib64/libcupti.so.13"});
  std::string tried;
  for (const auto& path : candidates) {
    api.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (api.handle != nullptr) {
      api.path = path;
      break;
    }
    const char* why = dlerror();
    tried += "\n  " + path + ": " + (why != nullptr ? why : "not found");
  }
  if (api.handle == nullptr) return Unavailable("libcupti not found; tried" + tried);

  std::string missing;
  auto resolve = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api.handle, symbol));
    if (fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + symbol;
  };
  resolve(api.GetVersion, "cuptiGetVersion");
  resolve(api.GetResultString, "cuptiGetResultString");
  resolve(api.RegisterCallbacks, "cuptiActivityRegisterCallbacks");
  resolve(api.Enable, "cuptiActivityEnable");
  resolve(api.FlushAll, "cuptiActivityFlushAll");
  resolve(api.GetNextRecord, "cuptiActivityGetNextRecord");
  resolve(api.PushExternalId, "cuptiActivityPushExternalCorrelationId");
  resolve(api.PopExternalId, "cuptiActivityPopExternalCorrelationId");
  if (!missing.empty()) return Unavailable(api.path + " lacks " + missing);

  uint32_t version = 0;
  if (CUptiResult r = api.GetVersion(&version); r != CUPTI_SUCCESS)
    return Unavailable("cuptiGetVersion: " + ResultText(r));
  // The activity records' layouts are those of the headers we were built with: same major.
  if (version / 10000 != CUPTI_API_VERSION / 10000)
    return Unavailable(api.path + " has API version " + std::to_string(version) + "; kiln-bench was built for " +
                       std::to_string(CUPTI_API_VERSION) + " (same major version needed)");
  if (CUptiResult r = api.RegisterCallbacks(BufferRequested, BufferCompleted); r != CUPTI_SUCCESS)
    return Unavailable("cuptiActivityRegisterCallbacks: " + ResultText(r));
  for (auto kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                    CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION}) {
    if (CUptiResult r = api.Enable(kind); r != CUPTI_SUCCESS)
      return Unavailable("cuptiActivityEnable(" + std::to_string(static_cast<int>(kind)) + "): " + ResultText(r));
  }
  return OkStatus();
}

class CuptiTimer : public Timer {
 public:
  CuptiTimer(const BenchDevice& device, StreamGate& gate) : device_(device), gate_(gate) {}

  const char* mechanism() const override { return "cupti_activity"; }

  StatusOr<TimedRun> Measure(int iterations, const std::function<Status(int)>& between,
                             const std::function<Status(int)>& call) override {
    CuptiApi& api = Api();
    KILN_RETURN_IF_ERROR(device_.Synchronize());
    api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // records of earlier work: not ours
    {
      std::lock_guard<std::mutex> lock(Collected().mu);
      Collected().work.clear();
      Collected().external.clear();
    }
    const uint64_t first_id = next_id_;
    next_id_ += static_cast<uint64_t>(iterations);

    TimedRun run;
    for (int base = 0; base < iterations; base += kMaxGatedCalls) {
      const int n = std::min(kMaxGatedCalls, iterations - base);
      KILN_RETURN_IF_ERROR(gate_.Close());
      Status enqueued = OkStatus();
      for (int j = 0; j < n && enqueued.ok(); ++j) {
        enqueued = between(base + j);
        if (!enqueued.ok()) break;
        api.PushExternalId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, first_id + static_cast<uint64_t>(base + j));
        enqueued = call(base + j);
        uint64_t popped = 0;
        api.PopExternalId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped);
      }
      gate_.Open();
      KILN_RETURN_IF_ERROR(device_.Synchronize());
      KILN_RETURN_IF_ERROR(enqueued);
      if (gate_.TimedOut()) run.warning = "the stream gate timed out (the times are still device-side)";
    }
    if (CUptiResult r = api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); r != CUPTI_SUCCESS)
      return Unavailable("cuptiActivityFlushAll: " + ResultText(r));

    std::vector<DeviceWork> work;
    std::unordered_map<uint32_t, uint64_t> external;
    {
      std::lock_guard<std::mutex> lock(Collected().mu);
      work.swap(Collected().work);
      external.swap(Collected().external);
    }
    std::vector<uint64_t> start(static_cast<size_t>(iterations), std::numeric_limits<uint64_t>::max());
    std::vector<uint64_t> end(static_cast<size_t>(iterations), 0);
    std::vector<std::string> first_call_names;
    std::vector<std::vector<KernelSpan>> spans(static_cast<size_t>(iterations));
    for (const auto& w : work) {
      auto it = external.find(w.correlation);
      if (it == external.end() || it->second < first_id || it->second >= first_id + static_cast<uint64_t>(iterations))
        continue;
      const size_t i = static_cast<size_t>(it->second - first_id);
      start[i] = std::min(start[i], w.start);
      end[i] = std::max(end[i], w.end);
      spans[i].push_back({w.name, w.start, w.end});
      if (i == 0 && std::find(first_call_names.begin(), first_call_names.end(), w.name) == first_call_names.end())
        first_call_names.push_back(w.name);
    }
    for (size_t i = 0; i < start.size(); ++i) {
      if (end[i] == 0 || end[i] < start[i])
        return Unavailable("no device work was recorded for call " + std::to_string(i) + " of " +
                           std::to_string(iterations) + " (records dropped, or the call launched nothing)");
      // A call launched as a programmatic dependent (the gemm family) starts while the call
      // before it finishes and waits inside: only what it adds after that call's end is its own,
      // so back-to-back calls' times still add up to the stream's time.
      const uint64_t from = i > 0 && end[i - 1] > start[i] && end[i - 1] < end[i] ? end[i - 1] : start[i];
      run.us.push_back(static_cast<double>(end[i] - from) / 1000.0);
    }
    // The batches' spans: calls [base, base + kMaxGatedCalls) ran back to back behind one gate.
    double span_ns = 0;
    for (size_t base = 0; base < start.size(); base += static_cast<size_t>(kMaxGatedCalls)) {
      const size_t last = std::min(start.size(), base + static_cast<size_t>(kMaxGatedCalls)) - 1;
      const uint64_t first_start = *std::min_element(start.begin() + base, start.begin() + last + 1);
      const uint64_t last_end = *std::max_element(end.begin() + base, end.begin() + last + 1);
      span_ns += static_cast<double>(last_end - first_start);
    }
    run.stream_us = span_ns / 1000.0 / static_cast<double>(iterations);
    for (const auto& name : first_call_names) run.kernels += (run.kernels.empty() ? "" : " ") + name;
    run.kernel_parts = KernelParts(std::move(spans));
    return run;
  }

 private:
  const BenchDevice& device_;
  StreamGate& gate_;
  uint64_t next_id_ = 1;
};

}  // namespace

Status StartCupti() {
  static const Status started = Start();
  return started;
}

StatusOr<std::unique_ptr<Timer>> MakeCuptiTimer(const BenchDevice& device, StreamGate& gate) {
  KILN_RETURN_IF_ERROR(StartCupti());
  return std::unique_ptr<Timer>(std::make_unique<CuptiTimer>(device, gate));
}

}  // namespace kiln::bench

#else  // !KILN_BENCH_HAVE_CUPTI

namespace kiln::bench {

Status StartCupti() {
  return Status(StatusCode::kUnavailable,
                "CUPTI: kiln-bench was built without the CUPTI headers (cupti.h not found in the CUDA toolkit)");
}

StatusOr<std::unique_ptr<Timer>> MakeCuptiTimer(const BenchDevice&, StreamGate&) { return StartCupti(); }

}  // namespace kiln::bench

#endif
