// The in-process module cache: a request (op and params, or a source; and the target arch)
// → its loaded module, and cache key → loaded module, so two requests that name the same
// cubin share one CUlibrary. A hit costs one map lookup and no RPC. Entries live as long as
// the process (a process uses a bounded set of kernels).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/core/driver/cuda_driver.h"
#include "client/core/loader/loaded_library.h"
#include "client/core/rpc/debug_compile.h"
#include "kiln/kernel.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::client {

class ModuleCache {
 public:
  static ModuleCache& Global();

  // The loaded module for `request` (its target arch set), fetched from the daemon through the
  // current settings and loaded on a miss. `entries` are kernels the caller will ask for.
  // `identity` names the request (OpIdentity or SourceIdentity of what it asks for);
  // with `reuse` false the daemon is asked again and a fresh module replaces the cached one.
  StatusOr<std::shared_ptr<const detail::LoadedLibrary>> GetOrLoad(const CudaDriver& driver,
                                                                   const v1::GetKernelRequest& request,
                                                                   const std::vector<std::string>& entries,
                                                                   const std::string& identity, bool reuse = true);

  // The module loaded for `identity`, or null.
  std::shared_ptr<const detail::LoadedLibrary> Find(const std::string& identity);

  // Everything that identifies a request (all but who asks and how the bytes travel), built from
  // the API's structs without protobuf (the repeat load's cost): what is asked for, the arch,
  // and the debug compile (the process's, KILN_DEBUG_COMPILE, unless given), as
  // MakeKernelRequest puts them in the request. Ops (LoadOp and every op launch) and sources
  // never share an identity.
  static std::string OpIdentity(const OpRequest& op, const std::string& arch,
                                const DebugCompile& debug = ProcessDebugCompile());
  static std::string SourceIdentity(const SourceRequest& source, const std::string& arch,
                                    const DebugCompile& debug = ProcessDebugCompile());

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const detail::LoadedLibrary>> by_request_;
  std::map<std::string, std::shared_ptr<const detail::LoadedLibrary>> by_key_;
};

}  // namespace kiln::client
