#include "client/diag/call_trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include "client/core/api/message_text.h"
#include "client/core/driver/cuda_driver.h"
#include "client/core/loader/launch_observer.h"
#include "client/diag/call_dump.h"
#include "client/diag/call_log.h"
#include "client/diag/op_filter.h"
#include "client/diag/tensor_stats.h"

namespace kiln::client::diag {
namespace {

// What one traced call carries besides its record.
struct ActiveCall {
  OpCall* call = nullptr;
  int level = 0;          // KILN_LOGLEVEL (0 while only an observer traces)
  bool selected = false;  // passes KILN_DUMP_INCLUDE / EXCLUDE (gates statistics and dumps)
  bool launched = false;
  bool capturing = false;   // the stream was capturing a CUDA graph at the first launch
  std::string dump_folder;  // non-empty once the inputs were dumped
};

thread_local ActiveCall* t_active = nullptr;
std::atomic<uint64_t> g_call_counter{0};

std::mutex g_observer_mu;
CallObserver g_observer;  // guarded by g_observer_mu

std::string Prefix(const OpCall& call) { return "[kiln api #" + std::to_string(call.id) + "] "; }

bool UsesDeviceMemory(const OpCall& call) {
  for (const auto& t : call.tensors)
    if (t.view.device.type != DeviceType::kCPU) return true;
  return false;
}

// Whether the call's stream is being captured into a CUDA graph. A query that fails (the
// legacy stream while another stream captures globally) counts as capturing: synchronizing
// then would invalidate the capture.
bool StreamCapturing(void* stream) {
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if ((*driver)->cuStreamIsCapturing(static_cast<CUstream>(stream), &status) != CUDA_SUCCESS) return true;
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

std::string StatsLine(const OpCall& call, const CallTensor& t) {
  const std::string head = Prefix(call) + "  stats " + t.name + ": ";
  if (t.view.device.type == DeviceType::kCPU) return head + "skipped (host memory)\n";
  if (t.view.numel() <= 0) return head + "count=0\n";
  auto stats = ComputeTensorStats(t.view, call.stream);
  if (!stats.ok()) return head + "unavailable: " + stats.status().ToString() + "\n";
  const TensorStats& s = *stats;
  std::string line = head + "count=" + std::to_string(s.count) + " nan=" + std::to_string(s.nan_count) +
                     " inf=" + std::to_string(s.inf_count);
  if (s.finite_count > 0) {
    char values[160];
    std::snprintf(values, sizeof(values), " min=%.9g max=%.9g mean=%.9g", s.min, s.max, s.mean);
    line += values;
  } else {
    line += " (no finite values)";
  }
  return line + "\n";
}

// "[kiln api #7]   input weight: bf16[4096] strides [1] cuda:0 @0x... align=256"
std::string TensorLine(const OpCall& call, const CallTensor& t, const char* role) {
  return Prefix(call) + "  " + role + " " + t.name + ": " + DescribeTensor(t.view) + "\n";
}

std::string KernelLine(const OpCall& call, const KernelChoice& k) {
  std::string line = Prefix(call) + "  kernel: uri=" + (k.uri.empty() ? "-" : k.uri) +
                     " key=" + (k.cache_key.empty() ? "-" : k.cache_key) + " arch=" + (k.arch.empty() ? "-" : k.arch) +
                     " entry=" + k.entry + " grid=" + DimsText(k.config.grid) + " block=" + DimsText(k.config.block) +
                     " smem=" + std::to_string(k.config.dynamic_smem_bytes);
  if (k.config.cluster.x > 0) line += " cluster=" + DimsText(k.config.cluster);
  if (!k.backend.empty()) line += " backend=" + k.backend;
  return line + "\n";
}

// Level 1: the name; 3: the params, stream and thread, and every input's metadata.
std::string StartRecord(const OpCall& call, int level) {
  std::string record = Prefix(call) + call.api;
  if (level < kLevelArguments) return record + "\n";
  std::string params;
  for (const auto& [k, v] : call.params) params += (params.empty() ? "" : ", ") + k + "=" + v;
  record += "(" + params + ") stream=" + PointerText(call.stream) +
            " tid=" + std::to_string(static_cast<long>(::syscall(SYS_gettid))) + "\n";
  for (const auto& t : call.tensors)
    if (t.IsInput()) record += TensorLine(call, t, t.role == Role::kInOut ? "inout" : "input");
  return record;
}

// The first launch of a call: level 5 statistics of its inputs, level 10 their dump.
std::string OnFirstLaunch(ActiveCall& a) {
  const OpCall& call = *a.call;
  if (a.level < kLevelStatistics || !a.selected) return "";
  std::string record;
  const bool device = UsesDeviceMemory(call);
  a.capturing = device && StreamCapturing(call.stream);
  if (a.capturing) {
    record += Prefix(call) + "  stats skipped: stream is capturing a CUDA graph\n";
    if (a.level >= kLevelDumps && !Config().dump_dir.empty())
      record += Prefix(call) + "  dump skipped: stream is capturing a CUDA graph\n";
    return record;
  }
  for (const auto& t : call.tensors)
    if (t.IsInput()) record += StatsLine(call, t);
  if (a.level >= kLevelDumps && !Config().dump_dir.empty()) {
    std::string note;
    if (Status s = SynchronizeCallStream(call); !s.ok()) {
      note = "dump skipped: " + s.ToString();
    } else {
      a.dump_folder = CallDumper::Global().BeginCall(call, &note);
    }
    if (!note.empty()) record += Prefix(call) + "  " + note + "\n";
  }
  return record;
}

// After the body: outputs' metadata (3), statistics (5), dump (10), and the outcome.
std::string EndRecord(ActiveCall& a, const Status& status) {
  const OpCall& call = *a.call;
  std::string record;
  if (a.level >= kLevelArguments)
    for (const auto& t : call.tensors)
      if (t.IsOutput()) record += TensorLine(call, t, t.role == Role::kInOut ? "inout" : "output");
  if (a.launched && a.selected && !a.capturing && status.ok() && a.level >= kLevelStatistics)
    for (const auto& t : call.tensors)
      if (t.IsOutput()) record += StatsLine(call, t);
  if (!a.dump_folder.empty())
    record += Prefix(call) + "  " + CallDumper::Global().FinishCall(call, a.dump_folder, status) + "\n";
  if (a.level >= kLevelArguments || (a.level >= kLevelNames && !status.ok()))
    record += Prefix(call) + "-> " + status.ToString() + "\n";
  return record;
}

void NoteOnce(std::atomic<bool>& said, const std::string& line) {
  if (!said.exchange(true)) CallLog::Global().Write(line);
}

}  // namespace

Status RunTraced(OpCall& call, Status (*body)(void*), void* body_context) {
  const DiagConfig& config = Config();  // the first call of the process parses the variables here
  if (Level() == 0) return body(body_context);
  // The loader reports this call's launches through its one hook (idempotent; a relaxed store).
  SetLaunchObserver(&BeforeLaunch);

  ActiveCall a;
  a.call = &call;
  a.level = config.level;
  call.id = g_call_counter.fetch_add(1, std::memory_order_relaxed) + 1;
  if (a.level >= kLevelStatistics) a.selected = OpSelected(config.include, config.exclude, call.op, call.api);
  if (a.level >= kLevelDumps && config.dump_dir.empty()) {
    static std::atomic<bool> said{false};
    NoteOnce(said, "[kiln] KILN_LOGLEVEL=" + std::to_string(a.level) +
                       " asks for dumps, but KILN_DUMP_DIR is not set: calls are logged as at level 5\n");
  }
  if (a.level >= kLevelNames) CallLog::Global().Write(StartRecord(call, a.level));

  ActiveCall* outer = t_active;
  t_active = &a;
  const Status status = body(body_context);
  t_active = nullptr;  // the statistics kernel's launches below belong to no call
  if (a.level >= kLevelNames) {
    const std::string record = EndRecord(a, status);
    if (!record.empty()) CallLog::Global().Write(record);
  }
  t_active = outer;
  CallObserver observer;
  {
    std::lock_guard<std::mutex> lock(g_observer_mu);
    observer = g_observer;
  }
  if (observer) observer(call, status);
  return status;
}

void BeforeLaunch(const ModuleInfo* module, std::string_view entry, const LaunchConfig& config) {
  ActiveCall* a = t_active;
  if (a == nullptr) return;
  t_active = nullptr;  // the statistics kernel's launches are not part of the call
  OpCall& call = *a->call;
  KernelChoice k;
  if (module != nullptr) {
    k.uri = module->uri;
    k.cache_key = module->cache_key;
    k.arch = module->arch;
  }
  k.entry = std::string(entry);
  k.config = config;
  k.backend = call.backend;
  call.kernels.push_back(k);
  if (a->level >= kLevelArguments) CallLog::Global().Write(KernelLine(call, k));
  if (!a->launched) {
    a->launched = true;
    const std::string record = OnFirstLaunch(*a);
    if (!record.empty()) CallLog::Global().Write(record);
    const int64_t pause_ms = Config().test_pause_ms;
    if (!a->dump_folder.empty() && pause_ms > 0)  // test hook: a window to kill the process mid-call
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  t_active = a;
}

bool InTracedCall() { return t_active != nullptr; }

void NoteBackend(std::string backend) {
  if (t_active != nullptr) t_active->call->backend = std::move(backend);
}

void SetCallObserver(CallObserver observer) {
  const int level = Config().level;
  std::lock_guard<std::mutex> lock(g_observer_mu);
  const bool on = static_cast<bool>(observer);
  g_observer = std::move(observer);
  detail::g_level.store(on && level == 0 ? 1 : level, std::memory_order_relaxed);
  if (on) SetLaunchObserver(&BeforeLaunch);
}

}  // namespace kiln::client::diag
