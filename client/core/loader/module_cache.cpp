#include "client/core/loader/module_cache.h"

#include <chrono>

#include "client/core/loader/loader_log.h"
#include "client/core/loader/module_info.h"
#include "client/core/rpc/cubin_fetch.h"
#include "client/core/rpc/debug_compile.h"

namespace kiln::client {

namespace {

// One field of an identity: a tag, the value's length, and the value, so that no bytes moved
// from one field into the next (or a separator inside a value) give another request's identity.
void AppendField(std::string& id, char tag, const std::string& value) {
  id.append(1, tag).append(std::to_string(value.size())).append(1, ':').append(value);
}

}  // namespace

// An op's identity in the module cache, built without protobuf: a repeat LoadOp of a loaded
// op, or an op's first launch in a context, costs a string and a hash lookup. A debug compile
// (KILN_DEBUG_COMPILE) is another module, so it is part of the identity.
std::string ModuleCache::OpIdentity(const OpRequest& op, const std::string& arch, const DebugCompile& debug) {
  std::string id = "op";
  AppendField(id, 'a', arch);
  AppendField(id, 'n', op.name);
  for (const auto& [k, v] : op.params) {
    AppendField(id, 'k', k);
    AppendField(id, 'v', v);
  }
  if (debug.any()) AppendField(id, 'd', debug.Describe());
  return id;
}

// A source's identity in the module cache, built without protobuf like OpIdentity (the request's
// serialization, with its UTF-8 checks, cost a warm LoadSource of a 6 KB source ~25 000
// instructions). Every field of SourceRequest, each with its length, so that no two sources
// share one; the arch and a debug compile as for ops.
std::string ModuleCache::SourceIdentity(const SourceRequest& source, const std::string& arch,
                                        const DebugCompile& debug) {
  size_t bytes = 64 + source.name.size() + source.code.size() + arch.size();
  for (const auto& e : source.entries) bytes += e.size() + 24;
  for (const auto& o : source.options) bytes += o.size() + 24;
  for (const auto& u : source.extra_units) bytes += u.name.size() + u.code.size() + 48;
  std::string id;
  id.reserve(bytes);
  auto field = [&id](char tag, const std::string& value) { AppendField(id, tag, value); };
  id.append("source");
  field('a', arch);
  field('n', source.name);
  field('c', source.code);
  for (const auto& e : source.entries) field('e', e);
  for (const auto& o : source.options) field('o', o);
  for (const auto& u : source.extra_units) {
    field('u', u.name);
    field('v', u.code);
  }
  if (debug.any()) field('d', debug.Describe());
  return id;
}

ModuleCache& ModuleCache::Global() {
  static auto* cache = new ModuleCache();  // leaked: modules stay loaded until exit
  return *cache;
}

std::shared_ptr<const detail::LoadedLibrary> ModuleCache::Find(const std::string& identity) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_request_.find(identity);
  return it == by_request_.end() ? nullptr : it->second;
}

StatusOr<std::shared_ptr<const detail::LoadedLibrary>> ModuleCache::GetOrLoad(const CudaDriver& driver,
                                                                              const v1::GetKernelRequest& request,
                                                                              const std::vector<std::string>& entries,
                                                                              const std::string& identity, bool reuse) {
  if (reuse) {
    if (auto found = Find(identity)) return found;
  }
  // Fetch and load outside the lock: a compile can take seconds, and other kernels must not
  // wait for it. Two threads racing for the same kernel both fetch; the first to finish wins.
  const auto start = std::chrono::steady_clock::now();
  auto fetched = FetchCubin(request);
  if (!fetched.ok()) {
    LogFetchFailure(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                    fetched.status());
    return fetched.status();
  }

  // Equal keys mean equal cubins; a daemon that sends no key gets one module per request.
  const std::string key = fetched->reply.cache_key().empty() ? "request:" + identity : fetched->reply.cache_key();
  if (reuse) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_key_.find(key);
    if (it != by_key_.end()) {
      by_request_.emplace(identity, it->second);
      LogFetch(LoaderEvent::kAlreadyLoaded, request, *fetched, 0);
      return it->second;
    }
  }
  ModuleInfo info = ToModuleInfo(fetched->reply);
  info.rpc_ms = fetched->rpc_ms;
  info.verify_ms = fetched->verify_ms;
  // The library keeps the bytes while loaded (the loader log's cubin size comes from the reply).
  auto loaded = detail::LoadedLibrary::Load(driver, std::move(fetched->cubin), std::move(info), entries);
  if (!loaded.ok()) {
    if (LoaderLogEnabled())
      WriteLoaderLine(LoaderLogLine(LoaderEvent::kLoadFailed, request, *fetched, 0) + ": " + loaded.status().message());
    return loaded.status();
  }
  LogFetch(LoaderEvent::kLoaded, request, *fetched, (*loaded)->info.load_ms);
  std::lock_guard<std::mutex> lock(mu_);
  if (!reuse) {
    by_key_[key] = *loaded;
    by_request_[identity] = *loaded;
    return *loaded;
  }
  auto [it, inserted] = by_key_.emplace(key, *loaded);
  by_request_.emplace(identity, it->second);
  return it->second;
}

}  // namespace kiln::client
