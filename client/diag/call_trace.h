// Call tracing: how an op entry point hands its call to the diagnostics, and how the launch
// path reports the kernel it is about to launch.
//
//   Status rms_norm(...) {
//     auto body = [&] { ...plan, launch... };
//     if (KILN_UNLIKELY(diag::Level() != 0))
//       return diag::Traced("rms_norm", "kiln::ops::rms_norm", stream,
//                           [&](diag::OpCall& c) { c.Out("out", out).In("input", input)...; }, body);
//     return body();
//   }
//
// With logging off the op pays that one branch on a cached integer; nothing is built. Traced
// logs the call before running the body (level 1: the name; 3: params and inputs), keeps the
// record as this thread's current call while the body runs, and logs the outcome after.
// BeforeLaunch is the loader's launch observer (client/core/loader/launch_observer.h), which
// Traced installs: LaunchFunction calls it right before cuLaunchKernelEx. The kernel line goes out before the launch,
// and on the call's first launch the inputs' statistics (level 5) and dump (level 10) are taken — after validation, so
// they never read memory a refused call pointed at.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "client/diag/diag_config.h"
#include "client/diag/op_call.h"
#include "kiln/kernel.h"
#include "kiln/status.h"

namespace kiln::client::diag {

// Runs `body` as the traced call `call` (Level() != 0 only).
Status RunTraced(OpCall& call, Status (*body)(void*), void* body_context);

template <typename Describe, typename Body>
Status Traced(const char* op, const char* api, void* stream, Describe&& describe, Body&& body) {
  OpCall call(op, api, stream);
  describe(call);
  return RunTraced(
      call, [](void* b) -> Status { return (*static_cast<std::remove_reference_t<Body>*>(b))(); },
      static_cast<void*>(&body));
}

// The launch observer, right before cuLaunchKernelEx, installed once anything is traced: records the
// kernel of this thread's traced call (if it is in one) and logs it; on the call's first
// launch also takes the inputs' statistics and dump. `module` may be null (a launch outside
// the op library).
void BeforeLaunch(const ModuleInfo* module, std::string_view entry, const LaunchConfig& config);

// Whether the calling thread is inside a traced call (for launchers that describe a choice).
bool InTracedCall();
// The op's choice for its next launches (a split-KV schedule, an all-reduce algorithm), shown
// on the kernel line and in meta.json. Call only when InTracedCall().
void NoteBackend(std::string backend);

// Receives every traced call of the process when it ends (kiln replay uses it to learn which
// kernels its call ran). While one is set, calls are traced even with KILN_LOGLEVEL=0, but
// nothing is logged, measured or dumped beyond what KILN_LOGLEVEL asks for. Empty: none.
using CallObserver = std::function<void(const OpCall&, const Status&)>;
void SetCallObserver(CallObserver observer);

}  // namespace kiln::client::diag
