#include "client/core/loader/launch_preparation.h"

#include <climits>

#include "client/core/api/invalid_argument.h"
#include "client/core/driver/devices.h"
#include "client/core/loader/arch_compat.h"
#include "client/core/loader/module_cache.h"
#include "client/core/rpc/kernel_request.h"

namespace kiln::client {
namespace {

Status Precondition(std::string message) { return Status(StatusCode::kFailedPrecondition, std::move(message)); }

// The launch hint of `entry` in the daemon's reply.
StatusOr<const EntryLaunch*> HintOf(const ModuleInfo& info, const char* entry) {
  for (const EntryLaunch& l : info.launch)
    if (l.entry == entry) return &l;
  return Precondition("the daemon's reply for " + info.uri + " has no launch hint for entry " + entry +
                      " (the op generator must send one for every entry its client launches)");
}

}  // namespace

StatusOr<ContextInfo> ContextForDevice(const CudaDriver& driver, int device, const char* api) {
  auto ctx = CurrentContext(driver, device);
  if (!ctx.ok()) return ctx.status().WithContext(api);
  if (ctx->device != device)
    return InvalidArgument(std::string(api) + ": the tensors are on cuda:" + std::to_string(device) +
                           ", but the current CUDA context is on cuda:" + std::to_string(ctx->device) +
                           "; make a context of cuda:" + std::to_string(device) +
                           " current first (e.g. cudaSetDevice(" + std::to_string(device) + "))");
  return ctx;
}

StatusOr<std::shared_ptr<const detail::LoadedLibrary>> FetchOpModule(const CudaDriver& driver, const OpRequest& op,
                                                                     const std::vector<std::string>& entries,
                                                                     const ContextInfo& ctx) {
  const std::string arch = ArchForComputeCapability(ctx.cc_major, ctx.cc_minor);
  KILN_ASSIGN_OR_RETURN(auto library, ModuleCache::Global().GetOrLoad(driver, MakeKernelRequest(op, arch), entries,
                                                                      ModuleCache::OpIdentity(op, arch)));
  const ModuleInfo& info = library->info;
  if (!CubinRunsOn(info.arch, ctx.cc_major, ctx.cc_minor))
    return Precondition("the daemon built " + info.uri + " for " + info.arch + ", which cannot run on cuda:" +
                        std::to_string(ctx.device) + " (" + ArchForComputeCapability(ctx.cc_major, ctx.cc_minor) + ")");
  return library;
}

StatusOr<OpLaunch> ResolveOpLaunch(const CudaDriver& driver, const OpKernels& op,
                                   const std::map<std::string, std::string>& params, const ContextInfo& ctx) {
  std::vector<std::string> entries;
  for (int i = 0; i < op.entry_count(); ++i) entries.emplace_back(op.entries[static_cast<size_t>(i)].name);
  KILN_ASSIGN_OR_RETURN(auto library, FetchOpModule(driver, OpRequest{op.op, params}, entries, ctx));
  const ModuleInfo& info = library->info;
  // Every param was sent in canonical form, so the daemon's canonical params must equal them.
  for (const auto& [key, value] : params) {
    auto it = info.params.find(key);
    if (it != info.params.end() && it->second != value)
      return Precondition("the daemon built " + info.uri + " with " + key + "=" + it->second + " for a request of " +
                          key + "=" + value);
  }

  OpLaunch launch;
  launch.library = library;
  for (int i = 0; i < op.entry_count(); ++i) {
    const OpKernels::Entry& want = op.entries[static_cast<size_t>(i)];
    KILN_ASSIGN_OR_RETURN(auto hint, HintOf(info, want.name));
    const EntryLaunch& h = *hint;
    if (h.block < want.min_block || h.block > 1024 || h.dynamic_smem < 0 || h.max_blocks < 0 ||
        h.items_per_block < (want.uses_items_per_block ? 1 : 0))
      return Precondition(
          "the launch hint of " + info.uri + " (" + want.name + ") is not one its launch can use: block " +
          std::to_string(h.block) + " (" + std::to_string(want.min_block) + "..1024), dynamic_smem " +
          std::to_string(h.dynamic_smem) + ", items_per_block " + std::to_string(h.items_per_block) +
          (want.uses_items_per_block ? " (at least 1)" : "") + ", max_blocks " + std::to_string(h.max_blocks));
    const int index = launch.library->FindEntry(want.name);
    if (index < 0) return Status(StatusCode::kNotFound, info.uri + " has no kernel " + want.name);
    KILN_ASSIGN_OR_RETURN(auto function, launch.library->Function(static_cast<size_t>(index), ctx.context,
                                                                  static_cast<unsigned>(h.dynamic_smem)));
    int max_threads = 0;
    KILN_RETURN_IF_ERROR(
        driver.Check(driver.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function),
                     "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)"));
    if (h.block > max_threads)
      return Precondition("the launch hint block=" + std::to_string(h.block) + " of " + info.uri + " (" + want.name +
                          ") exceeds what the kernel can run per block (" + std::to_string(max_threads) + " threads)");
    EntryLaunchReady& ready = launch.entries[static_cast<size_t>(i)];
    ready.function = function;
    ready.block = static_cast<unsigned>(h.block);
    ready.dynamic_smem = static_cast<unsigned>(h.dynamic_smem);
    ready.items_per_block = h.items_per_block;
    ready.max_blocks = h.max_blocks;
    ready.programmatic = want.waits_first && ctx.cc_major >= 9;
  }
  return launch;
}

}  // namespace kiln::client
