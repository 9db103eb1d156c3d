#include "client/core/loader/module_cache.h"

#include <chrono>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "client/core/loader/loader_log.h"
#include "client/core/loader/module_info.h"
#include "client/core/rpc/cubin_fetch.h"
#include "client/core/rpc/debug_compile.h"

namespace kiln::client {

// Map fields serialize in key order only when asked to be deterministic.
std::string ModuleCache::RequestIdentity(const v1::GetKernelRequest& request) {
  // The two per-call fields are not part of what is asked for. A fetch adds them only to what it
  // sends (cubin_fetch.cpp), so the request is serialized as it is, without a copy of its
  // source, unless a caller set them itself.
  v1::GetKernelRequest copy;
  const v1::GetKernelRequest* identity_of = &request;
  if (!request.client_id().empty() || request.prefer_blob_path()) {
    copy = request;
    copy.clear_client_id();
    copy.clear_prefer_blob_path();
    identity_of = &copy;
  }
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    identity_of->SerializeToCodedStream(&coded);
  }
  return bytes;
}

// An op's identity in the module cache, built without protobuf: a repeat LoadOp of a loaded
// op costs a string and a hash lookup (requests differ from sources by the leading tag). A
// debug compile (KILN_DEBUG_COMPILE) is another module, so it is part of the identity.
std::string ModuleCache::OpIdentity(const OpRequest& op, const std::string& arch) {
  std::string id = "op\n" + op.name + "\n" + arch;
  for (const auto& [k, v] : op.params) id.append("\n").append(k).append("=").append(v);
  if (const DebugCompile& debug = ProcessDebugCompile(); debug.any()) id.append("\ndebug ").append(debug.Describe());
  return id;
}

// A source's identity in the module cache, built without protobuf like OpIdentity (the request's
// serialization, with its UTF-8 checks, cost a warm LoadSource of a 6 KB source ~25 000
// instructions). Every field of SourceRequest, each with its length, so that no two sources
// share one; the arch and a debug compile as for ops.
std::string ModuleCache::SourceIdentity(const SourceRequest& source, const std::string& arch) {
  size_t bytes = 64 + source.name.size() + source.code.size() + arch.size();
  for (const auto& e : source.entries) bytes += e.size() + 24;
  for (const auto& o : source.options) bytes += o.size() + 24;
  for (const auto& u : source.extra_units) bytes += u.name.size() + u.code.size() + 48;
  std::string id;
  id.reserve(bytes);
  auto field = [&id](char tag, const std::string& value) {
    id.append(1, tag).append(std::to_string(value.size())).append(1, ':').append(value);
  };
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
  if (const DebugCompile& debug = ProcessDebugCompile(); debug.any()) field('d', debug.Describe());
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
