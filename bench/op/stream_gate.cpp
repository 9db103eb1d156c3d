#include "bench/op/stream_gate.h"

#include <atomic>

namespace kiln::bench {
namespace {

// 0.5 s: enqueuing kMaxGatedCalls calls takes about a millisecond; a gate that waits longer
// was forgotten, and the batch then runs ungated (reported, not hung).
constexpr unsigned long long kGateTimeoutNs = 500ull * 1000 * 1000;

constexpr const char* kGateSource = R"(
extern "C" __global__ void kiln_bench_gate(volatile unsigned* words, unsigned long long timeout_ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (words[0] == 0u) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) {
      words[1] = 1u;
      return;
    }
    __nanosleep(1000);
  }
}
)";

}  // namespace

StatusOr<std::unique_ptr<StreamGate>> StreamGate::Create(const BenchDevice& device) {
  std::unique_ptr<StreamGate> gate(new StreamGate());
  gate->device_ = &device;
  KILN_ASSIGN_OR_RETURN(auto words, HostMappedWords::Allocate(device, 2));
  gate->words_ = std::move(words);
  SourceRequest source;
  source.name = "kiln_bench_gate";
  source.code = kGateSource;
  source.entries = {"kiln_bench_gate"};
  auto module = LoadSource(source);
  if (!module.ok()) return module.status().WithContext("the stream gate kernel");
  KILN_ASSIGN_OR_RETURN(auto kernel, module->kernel("kiln_bench_gate"));
  gate->kernel_ = kernel;
  return gate;
}

Status StreamGate::Close() {
  words_->host()[0] = 0;
  words_->host()[1] = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  LaunchConfig config;
  config.stream = device_->stream();
  return kernel_(config, reinterpret_cast<void*>(words_->device()), kGateTimeoutNs);
}

void StreamGate::Open() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  words_->host()[0] = 1;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool StreamGate::TimedOut() const { return words_->host()[1] != 0; }

}  // namespace kiln::bench
