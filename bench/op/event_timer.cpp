// The cuda_events timer (timer.h).
#include <algorithm>
#include <vector>

#include "bench/op/timer.h"

namespace kiln::bench {
namespace {

class EventTimer : public Timer {
 public:
  EventTimer(const BenchDevice& device, StreamGate& gate) : device_(device), gate_(gate) {}
  ~EventTimer() override {
    for (CUevent e : events_) device_.driver().cuEventDestroy(e);
  }

  const char* mechanism() const override { return "cuda_events"; }

  StatusOr<TimedRun> Measure(int iterations, const std::function<Status(int)>& between,
                             const std::function<Status(int)>& call) override {
    const auto& d = device_.driver();
    while (events_.size() < 2 * static_cast<size_t>(kMaxGatedCalls)) {
      CUevent e = nullptr;
      KILN_RETURN_IF_ERROR(device_.Check(d.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate"));
      events_.push_back(e);
    }
    TimedRun run;
    for (int base = 0; base < iterations; base += kMaxGatedCalls) {
      const int n = std::min(kMaxGatedCalls, iterations - base);
      KILN_RETURN_IF_ERROR(gate_.Close());
      Status enqueued = OkStatus();
      for (int j = 0; j < n && enqueued.ok(); ++j) {
        enqueued = between(base + j);
        if (enqueued.ok()) enqueued = device_.Check(d.cuEventRecord(events_[2 * j], device_.stream()), "cuEventRecord");
        if (enqueued.ok()) enqueued = call(base + j);
        if (enqueued.ok())
          enqueued = device_.Check(d.cuEventRecord(events_[2 * j + 1], device_.stream()), "cuEventRecord");
      }
      gate_.Open();  // before any return: a closed gate would hold the stream until its timeout
      KILN_RETURN_IF_ERROR(device_.Synchronize());
      KILN_RETURN_IF_ERROR(enqueued);
      if (gate_.TimedOut()) run.warning = "the stream gate timed out: launch gaps may be in these times";
      for (int j = 0; j < n; ++j) {
        float ms = 0;
        KILN_RETURN_IF_ERROR(
            device_.Check(d.cuEventElapsedTime(&ms, events_[2 * j], events_[2 * j + 1]), "cuEventElapsedTime"));
        run.us.push_back(static_cast<double>(ms) * 1000.0);
      }
    }
    return run;
  }

 private:
  const BenchDevice& device_;
  StreamGate& gate_;
  std::vector<CUevent> events_;
};

}  // namespace

std::unique_ptr<Timer> MakeEventTimer(const BenchDevice& device, StreamGate& gate) {
  return std::make_unique<EventTimer>(device, gate);
}

}  // namespace kiln::bench
