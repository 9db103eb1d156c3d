// Artifact: one compiled kernel as the daemon serves it from memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/jit/jit_spec.h"
#include "server/jit/kernel_attributes.h"

namespace kiln::server {

struct Artifact {
  std::string key;
  std::string uri;
  std::string op;
  std::map<std::string, std::string> params;
  std::string arch;
  std::string sha256;
  std::shared_ptr<const std::string> cubin;
  uint32_t crc32c = 0;    // CRC-32C of *cubin (proto/crc32c.h), for same-node clients
  std::string blob_path;  // empty when nothing was stored (--no-cache)
  std::vector<KernelAttributes> kernels;
  std::vector<kernels::EntryLaunch> launch;
  std::string job_id;  // the job that built it

  // The wire layer's serialization of the reply fields this artifact alone decides, made on its
  // first serve and kept while it is (server/rpc/kernel_wire.h, ArtifactReplyFields): not part of
  // what the artifact is, a memo of the same-node fetch's hot path.
  mutable std::once_flag reply_fields_once;
  mutable std::string reply_fields;
};

// JSON forms stored in the cache index (EntryRecord::kernels_json / launch_json).
std::string KernelsToJson(const std::vector<KernelAttributes>& kernels);
std::vector<KernelAttributes> KernelsFromJson(const std::string& json);
std::string LaunchToJson(const std::vector<kernels::EntryLaunch>& launch);
std::vector<kernels::EntryLaunch> LaunchFromJson(const std::string& json);

}  // namespace kiln::server
