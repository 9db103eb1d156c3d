#include "client/ops/op_dispatch.h"

#include <climits>

#include "client/driver/devices.h"
#include "client/loader/arch_compat.h"
#include "client/loader/launch_hint.h"
#include "client/loader/module_cache.h"
#include "client/rpc/kernel_request.h"

namespace kiln::client {

StatusOr<ContextInfo> ContextForDevice(const CudaDriver& driver, int device, const char* api) {
  auto ctx = CurrentContext(driver, device);
  if (!ctx.ok()) return ctx.status().WithContext(api);
  if (ctx->device != device)
    return Status(StatusCode::kInvalidArgument,
                  std::string(api) + ": the tensors are on cuda:" + std::to_string(device) +
                      ", but the current CUDA context is on cuda:" + std::to_string(ctx->device) +
                      "; make a context of cuda:" + std::to_string(device) +
                      " current first (e.g. cudaSetDevice(" + std::to_string(device) + "))");
  return ctx;
}

StatusOr<std::shared_ptr<const detail::LoadedLibrary>> FetchOpModule(
    const CudaDriver& driver, const OpRequest& op, const std::vector<std::string>& entries,
    const ContextInfo& ctx) {
  auto request = MakeKernelRequest(op, ArchForComputeCapability(ctx.cc_major, ctx.cc_minor));
  auto library = ModuleCache::Global().GetOrLoad(driver, request, entries,
                                                 ModuleCache::RequestIdentity(request));
  if (!library.ok()) return library.status();
  const ModuleInfo& info = (*library)->info;
  if (!CubinRunsOn(info.arch, ctx.cc_major, ctx.cc_minor))
    return Status(StatusCode::kFailedPrecondition,
                  "the daemon built " + info.uri + " for " + info.arch + ", which cannot run on cuda:" +
                      std::to_string(ctx.device) + " (" +
                      ArchForComputeCapability(ctx.cc_major, ctx.cc_minor) + ")");
  return library;
}

Status CheckModuleParam(const ModuleInfo& info, const char* key, const std::string& value) {
  auto it = info.params.find(key);
  if (it != info.params.end() && it->second != value)
    return Status(StatusCode::kFailedPrecondition,
                  "the daemon built " + info.uri + " with " + key + "=" + it->second +
                      " for a request of " + key + "=" + value);
  return OkStatus();
}

StatusOr<OpLaunch> HintedEntryLaunch(const CudaDriver& driver,
                                     const std::shared_ptr<const detail::LoadedLibrary>& library,
                                     const char* entry, const ContextInfo& ctx, int64_t min_block) {
  const ModuleInfo& info = library->info;
  auto block = LaunchHint(info, "block", min_block, 1024);
  if (!block.ok()) return block.status();
  auto smem = LaunchHint(info, "dynamic_smem", 0, INT_MAX);
  if (!smem.ok()) return smem.status();
  return EntryLaunch(driver, library, entry, ctx, *block, *smem);
}

StatusOr<OpLaunch> EntryLaunch(const CudaDriver& driver,
                               const std::shared_ptr<const detail::LoadedLibrary>& library,
                               const char* entry, const ContextInfo& ctx, int64_t block, int64_t smem) {
  const ModuleInfo& info = library->info;
  int index = library->FindEntry(entry);
  if (index < 0) return Status(StatusCode::kNotFound, info.uri + " has no kernel " + entry);
  auto function = library->Function(static_cast<size_t>(index), ctx.context, static_cast<unsigned>(smem));
  if (!function.ok()) return function.status();
  int max_threads = 0;
  KILN_RETURN_IF_ERROR(driver.Check(
      driver.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, *function),
      "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)"));
  if (block > max_threads)
    return Status(StatusCode::kFailedPrecondition,
                  "the launch hint block=" + std::to_string(block) + " of " + info.uri + " (" + entry +
                      ") exceeds what the kernel can run per block (" + std::to_string(max_threads) +
                      " threads)");
  OpLaunch launch;
  launch.function = *function;
  launch.block = static_cast<unsigned>(block);
  launch.dynamic_smem = static_cast<unsigned>(smem);
  launch.library = library;
  return launch;
}

}  // namespace kiln::client
