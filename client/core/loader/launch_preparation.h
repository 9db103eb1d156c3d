// What every op launch does before cuLaunchKernelEx, in one place: find the context of the
// call's device, and in it the launch of the op's specialization — from the thread's memo,
// else the process-wide launch cache, else resolved once: the module fetched from kilnd (one
// RPC per process), checked against the request, and each entry turned into a function in
// this context with the launch shape the generator prescribed (the typed launch hints).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/current_context.h"
#include "client/core/loader/launch_cache.h"
#include "client/core/loader/loaded_library.h"
#include "client/core/rpc/client_counters.h"
#include "kiln/kernel.h"
#include "kiln/status.h"

namespace kiln::client {

// The calling thread's current context (or the device's primary one when none is current),
// which must be on `device`; INVALID_ARGUMENT naming both devices otherwise.
StatusOr<ContextInfo> ContextForDevice(const CudaDriver& driver, int device, const char* api);

// The loaded module of `op` for the context's arch (one RPC on the first call of the process),
// refused when the daemon built it for an arch the device cannot run.
StatusOr<std::shared_ptr<const detail::LoadedLibrary>> FetchOpModule(const CudaDriver& driver, const OpRequest& op,
                                                                     const std::vector<std::string>& entries,
                                                                     const ContextInfo& ctx);

// `op`'s module for `params` in `ctx`, resolved into an OpLaunch: FAILED_PRECONDITION when the
// daemon's canonical params differ from a requested one (it answered another specialization),
// when an entry has no launch hint or a hint the op cannot use, or when a block exceeds what
// the function can run.
StatusOr<OpLaunch> ResolveOpLaunch(const CudaDriver& driver, const OpKernels& op,
                                   const std::map<std::string, std::string>& params, const ContextInfo& ctx);

// The launch of `spec` (Spec: the op's specialization, with Fields() and Params()) in `ctx`:
// the thread's memo, the global cache, else ResolveOpLaunch once (counted as a fast-path hit or
// miss). A template so that the hit path builds no std::function and no string.
template <typename Spec>
StatusOr<const OpLaunch*> FindOrResolveLaunch(const CudaDriver& driver, const OpKernels& op, const Spec& spec,
                                              const ContextInfo& ctx) {
  thread_local LaunchMemo<Spec> memo;
  const OpLaunchKey<Spec> key{ctx.context, &op, spec};
  if (const OpLaunch* launch = memo.Find(key)) {
    OpFastHits::Bump();
    return launch;
  }
  LaunchCache<Spec>& cache = LaunchCache<Spec>::Global();
  if (const OpLaunch* launch = cache.Find(key)) {
    OpFastHits::Bump();
    memo.Remember(key, launch);
    return launch;
  }
  Bump(Counters().op_fast_misses);
  KILN_ASSIGN_OR_RETURN(OpLaunch resolved, ResolveOpLaunch(driver, op, spec.Params(), ctx));
  const OpLaunch* launch = cache.Insert(key, std::move(resolved));
  memo.Remember(key, launch);
  return launch;
}

// What a launcher holds once its launch is ready: the driver, the current context of the
// call's device, and the launch of the op's specialization there.
struct PreparedLaunch {
  const CudaDriver* driver = nullptr;
  CUcontext context = nullptr;
  const OpLaunch* launch = nullptr;
};

// The steps before every op launch: the driver, the current context (which must be on
// `device`), and the launch in it of the specialization spec_for(context) gives (a callable
// from const ContextInfo& to the op's Spec; for ops whose specialization depends on the
// device: its compute capability, its SM count). *spec_out, when given, receives that spec.
// Errors name `api`.
template <typename SpecFor, typename Spec = std::invoke_result_t<SpecFor, const ContextInfo&>>
StatusOr<PreparedLaunch> PrepareOpLaunchFor(const OpKernels& op, SpecFor&& spec_for, int device, const char* api,
                                            Spec* spec_out = nullptr) {
  // The driver without a StatusOr on the hot path; Get() says why there is none.
  const CudaDriver* driver = CudaDriver::GetOrNull();
  if (driver == nullptr) return CudaDriver::Get().status().WithContext(api);
  // The repeat call's context: seen before on this thread and on the call's device (no Status,
  // no StatusOr: the op-call overhead); else found, or refused, by ContextForDevice.
  ContextInfo ctx;
  if (const ContextInfo* seen = SeenCurrentContext(*driver); seen != nullptr && seen->device == device) {
    ctx = *seen;
  } else {
    KILN_ASSIGN_OR_RETURN(ctx, ContextForDevice(*driver, device, api));
  }
  const Spec spec = spec_for(static_cast<const ContextInfo&>(ctx));
  if (spec_out != nullptr) *spec_out = spec;
  auto found = FindOrResolveLaunch(*driver, op, spec, ctx);
  if (!found.ok()) return found.status().WithContext(api);
  return PreparedLaunch{driver, ctx.context, *found};
}

// The same for a specialization that does not depend on the device.
template <typename Spec>
StatusOr<PreparedLaunch> PrepareOpLaunch(const OpKernels& op, const Spec& spec, int device, const char* api) {
  return PrepareOpLaunchFor(
      op, [&spec](const ContextInfo&) { return spec; }, device, api);
}

}  // namespace kiln::client
