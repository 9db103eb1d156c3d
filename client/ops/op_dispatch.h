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

// EntryLaunch with the block and the dynamic shared memory that the op's generator sent as the
// launch hints "block" (in [min_block, 1024]) and "dynamic_smem".
StatusOr<OpLaunch> HintedEntryLaunch(const CudaDriver& driver,
                                     const std::shared_ptr<const detail::LoadedLibrary>& library,
                                     const char* entry, const ContextInfo& ctx, int64_t min_block = 1);

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

// What a launcher holds once its launch is ready: the driver, the current context of the
// call's device, and the launch of the op's specialization there.
struct PreparedLaunch {
  const CudaDriver* driver = nullptr;
  CUcontext context = nullptr;
  const OpLaunch* launch = nullptr;
};

// The steps before every op launch: the driver, the current context (which must be on
// `device`), and the launch of `key` in it (key.context is filled in here), resolved once by
// `resolve(driver, ctx)` -> StatusOr<OpLaunch>. Errors name `api`.
template <typename Resolve>
StatusOr<PreparedLaunch> PrepareOpLaunch(int device, const char* api, OpLaunchKey key, Resolve&& resolve) {
  auto driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status().WithContext(api);
  auto ctx = ContextForDevice(**driver, device, api);
  if (!ctx.ok()) return ctx.status();
  key.context = ctx->context;
  auto found = FindOrResolveLaunch(key, [&] { return resolve(**driver, *ctx); });
  if (!found.ok()) return found.status().WithContext(api);
  return PreparedLaunch{*driver, ctx->context, *found};
}

}  // namespace kiln::client
