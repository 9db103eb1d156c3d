// kiln::Module, kiln::Kernel and the functions that load them (kiln/kernel.h).
#include "kiln/kernel.h"
#include <chrono>
#include "client/core/api/invalid_argument.h"

#include "client/core/driver/cuda_driver.h"
#include "client/core/driver/current_context.h"
#include "client/core/driver/devices.h"
#include "client/core/loader/arch_compat.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/loaded_library.h"
#include "client/core/loader/loader_log.h"
#include "client/core/loader/module_cache.h"
#include "client/core/loader/module_info.h"
#include "client/core/rpc/cubin_fetch.h"
#include "client/core/rpc/kernel_request.h"
#include "client/core/rpc/kernel_rpc.h"

namespace kiln {
namespace {

using client::CudaDriver;

struct Target {
  const CudaDriver* driver = nullptr;
  int device = 0;
  std::string arch;
};

// The device a load is for and the arch to ask for.
StatusOr<Target> TargetFor(const LoadOptions& options) {
  KILN_ASSIGN_OR_RETURN(auto driver, CudaDriver::Get());
  Target target;
  target.driver = driver;
  if (options.device < 0) {
    KILN_ASSIGN_OR_RETURN(auto ctx, client::CurrentContext(*driver, -1));
    target.device = ctx.device;
    target.arch = client::ArchForComputeCapability(ctx.cc_major, ctx.cc_minor);
  } else {
    KILN_ASSIGN_OR_RETURN(auto info, client::DescribeDevice(*driver, options.device));
    target.device = options.device;
    target.arch = info.arch();
  }
  return target;
}

// `identity`: ModuleCache::OpIdentity or SourceIdentity of what `request` asks for.
StatusOr<Module> Load(const Target& target, v1::GetKernelRequest request, const LoadOptions& options,
                      const std::vector<std::string>& entries, const std::string& identity) {
  request.mutable_target()->set_arch(target.arch);
  KILN_ASSIGN_OR_RETURN(auto library, client::ModuleCache::Global().GetOrLoad(*target.driver, request, entries,
                                                                              identity, options.reuse_loaded));
  return detail::LoadedLibrary::MakeModule(std::move(library), target.device);
}

StatusOr<ModuleInfo> PrefetchRequest(const v1::GetKernelRequest& request) {
  if (request.target().arch().empty())
    return client::InvalidArgument("prefetch of " + client::DescribeRequest(request) +
                                   ": name the arch to build for (e.g. \"sm_90a\")");
  const auto start = std::chrono::steady_clock::now();
  auto fetched = client::FetchCubin(request);
  if (!fetched.ok()) {
    client::LogFetchFailure(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                            fetched.status());
    return fetched.status();
  }
  client::LogFetch(client::LoaderEvent::kFetched, request, *fetched, 0);
  ModuleInfo info = client::ToModuleInfo(fetched->reply);
  info.rpc_ms = fetched->rpc_ms;
  info.verify_ms = fetched->verify_ms;
  return info;
}

}  // namespace

const char* OriginName(Origin origin) {
  switch (origin) {
    case Origin::kMemory: return "memory";
    case Origin::kDisk: return "disk";
    case Origin::kPrebuilt: return "prebuilt";
    case Origin::kCompiled: return "compiled";
    case Origin::kRepository: return "repository";
    case Origin::kRemote: return "remote";
    case Origin::kUnspecified: break;
  }
  return "unspecified";
}

const std::string& Kernel::name() const {
  static const std::string empty;
  return library_ ? library_->entries[entry_].name : empty;
}

const ModuleInfo& Kernel::module_info() const {
  static const ModuleInfo empty;
  return library_ ? library_->info : empty;
}

Status Kernel::Launch(const LaunchConfig& config, void** args) const {
  if (!library_) return client::InvalidArgument("launch of an empty kiln::Kernel (get one from kiln::Module::kernel)");
  const detail::LoadedLibrary& lib = *library_;
  const std::string& name = lib.entries[entry_].name;
  // The repeat launch's context: the one its thread saw last (no Status built); else the current
  // one found, or the primary context of the module's device made current.
  client::ContextInfo ctx;
  if (const client::ContextInfo* seen = client::SeenCurrentContext(*lib.driver); seen != nullptr) {
    ctx = *seen;
  } else {
    auto found = client::CurrentContext(*lib.driver, device_);
    if (!found.ok()) return found.status().WithContext("launch of " + name);
    ctx = *found;
  }
  if (!client::CubinRunsOn(lib.info.arch, ctx.cc_major, ctx.cc_minor))
    return Status(StatusCode::kFailedPrecondition,
                  "launch of " + name + ": " + lib.info.uri + " was built for " + lib.info.arch +
                      ", but the current context is on cuda:" + std::to_string(ctx.device) + ", a " +
                      client::ArchForComputeCapability(ctx.cc_major, ctx.cc_minor) +
                      " device; load the module for that device");
  KILN_ASSIGN_OR_RETURN(auto function, lib.Function(entry_, ctx.context, config.dynamic_smem_bytes));
  return client::LaunchFunction(*lib.driver, function, config, args, name);
}

const ModuleInfo& Module::info() const {
  static const ModuleInfo empty;
  return library_ ? library_->info : empty;
}

std::vector<std::string> Module::entries() const {
  std::vector<std::string> names;
  if (library_)
    for (const auto& e : library_->entries) names.push_back(e.name);
  return names;
}

StatusOr<Kernel> Module::kernel(std::string_view entry) const {
  if (!library_) return client::InvalidArgument("kernel() of an empty kiln::Module");
  int index = library_->FindEntry(entry);
  if (index < 0)
    return Status(StatusCode::kNotFound, "module " + library_->info.uri + " has no kernel '" + std::string(entry) +
                                             "' (it has: " + library_->EntryNames() + ")");
  Kernel kernel;
  kernel.library_ = library_;
  kernel.entry_ = static_cast<size_t>(index);
  kernel.device_ = device_;
  return kernel;
}

StatusOr<Module> LoadOp(const OpRequest& op, const LoadOptions& options) {
  auto target = TargetFor(options);
  if (!target.ok()) return target.status().WithContext("loading op " + op.name);
  std::string identity = client::ModuleCache::OpIdentity(op, target->arch);
  if (options.reuse_loaded) {  // the repeat path: no protobuf, no RPC
    if (auto loaded = client::ModuleCache::Global().Find(identity))
      return detail::LoadedLibrary::MakeModule(std::move(loaded), target->device);
  }
  return Load(*target, client::MakeKernelRequest(op, ""), options, {}, identity);
}

StatusOr<Module> LoadSource(const SourceRequest& source, const LoadOptions& options) {
  auto target = TargetFor(options);
  if (!target.ok()) return target.status().WithContext("loading source " + source.name);
  const std::string identity = client::ModuleCache::SourceIdentity(source, target->arch);
  if (options.reuse_loaded) {  // the repeat path: no protobuf, no RPC
    if (auto loaded = client::ModuleCache::Global().Find(identity))
      return detail::LoadedLibrary::MakeModule(std::move(loaded), target->device);
  }
  return Load(*target, client::MakeKernelRequest(source, ""), options, source.entries, identity);
}

StatusOr<ModuleInfo> Prefetch(const OpRequest& op, const std::string& arch) {
  return PrefetchRequest(client::MakeKernelRequest(op, arch));
}

StatusOr<ModuleInfo> Prefetch(const SourceRequest& source, const std::string& arch) {
  return PrefetchRequest(client::MakeKernelRequest(source, arch));
}

}  // namespace kiln
