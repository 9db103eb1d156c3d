// What every op launcher does before its launch, in one place: find the context of the call's
// device, fetch and check the op's module, turn an entry into an OpLaunch, and look the launch
// up in the in-process launch cache (resolving it once on a miss).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "client/driver/cuda_driver.h"
#include "client/driver/current_context.h"
#include "client/loader/loaded_library.h"
#include "client/ops/op_launch_cache.h"
#include "client/rpc/client_counters.h"
#include "kiln/kernel.h"
#include "kiln/status.h"

namespace kiln::client {

// The calling thread's current context (or the device's primary one when none is current),
// which must be on `device`; INVALID_ARGUMENT naming both devices otherwise.
StatusOr<ContextInfo> ContextForDevice(const CudaDriver& driver, int device, const char* api);

// The loaded module of `op` for the context's arch (one RPC on the first call of the process),
// refused when the daemon built it for an arch the device cannot run.
StatusOr<std::shared_ptr<const detail::LoadedLibrary>> FetchOpModule(
    const CudaDriver& driver, const OpRequest& op, const std::vector<std::string>& entries,
    const ContextInfo& ctx);

// FAILED_PRECONDITION when the module's canonical param `key` is not `value` (the daemon
// answered another specialization than the one asked for).
Status CheckModuleParam(const ModuleInfo& info, const char* key, const std::string& value);

// One entry of a loaded module as an OpLaunch: its function in this context (opted in to
// `smem` bytes of dynamic shared memory) and a block the function can run.
StatusOr<OpLaunch> EntryLaunch(const CudaDriver& driver,
                               const std::shared_ptr<const detail::LoadedLibrary>& library,
                               const char* entry, const ContextInfo& ctx, int64_t block, int64_t smem);

// The cached launch of `key`, or `resolve()`'s, inserted (counted as a fast-path hit or miss).
// A template, so the hit path builds no std::function (no allocation on a repeat call).
// A thread first asks its own OpLaunchMemo (no lock), then the global cache.
template <typename Resolve>
StatusOr<const OpLaunch*> FindOrResolveLaunch(const OpLaunchKey& key, Resolve&& resolve) {
  thread_local OpLaunchMemo memo;
  if (const OpLaunch* launch = memo.Find(key)) {
    Bump(Counters().op_fast_hits);
    return launch;
  }
  OpLaunchCache& cache = OpLaunchCache::Global();
  if (const OpLaunch* launch = cache.Find(key)) {
    Bump(Counters().op_fast_hits);
    memo.Remember(key, launch);
    return launch;
  }
  Bump(Counters().op_fast_misses);
  StatusOr<OpLaunch> resolved = resolve();
  if (!resolved.ok()) return resolved.status();
  const OpLaunch* launch = cache.Insert(key, std::move(resolved).value());
  memo.Remember(key, launch);
  return launch;
}

}  // namespace kiln::client
