// JitSpec: everything the engine needs to compile one kernel specialization, and nothing
// about how or where: the op generators and the raw-source policy produce it, the engine
// consumes it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/jit/arch.h"

namespace kiln::kernels {

// One source file of a compile, held in memory: the engine hands NVRTC exact bytes, so the
// bytes hashed into the cache key are the bytes compiled.
struct SourceFile {
  enum class Origin {
    kGenerated,  // rendered by a generator (a config header)
    kKernels,    // copied from the kernels tree (tree_path says from where)
    kRequest,    // sent by the client (raw source requests)
  };
  std::string name;       // file name inside the per-URI generation folder: "rmsnorm.cu"
  std::string content;
  Origin origin = Origin::kGenerated;
  std::string tree_path;  // for kKernels: path relative to the kernels folder
};

using Params = std::map<std::string, std::string>;

struct JitSpec {
  std::string op;   // op family ("rmsnorm"), or "source" for raw sources
  std::string uri;  // deterministic, readable, unique per specialization: "rmsnorm_bf16_h4096"
  Params params;    // canonical params: defaults filled in, values normalized

  // Headers rendered for this specialization (included by name, e.g. "kiln_config.cuh").
  std::vector<SourceFile> headers;
  // Compilation units. More than one unit, or `link`, means -dlto per unit + nvJitLink.
  std::vector<SourceFile> units;
  bool link = false;

  // NVRTC options of the spec itself (defines, -std, fast-math...). The engine adds the arch,
  // include paths and diagnostics; all options that change the output are part of the key.
  std::vector<std::string> nvrtc_options;
  std::vector<std::string> link_options;  // nvJitLink options beyond -arch and -lto

  std::vector<std::string> entries;          // extern "C" __global__ names in the cubin
  std::vector<ArchFamily> arch_families;     // which targets this spec can be built for

  // Launch hints the client needs and cannot derive itself (block size chosen by the
  // generator, rows per block...). Returned verbatim in GetKernelResponse.launch.
  std::map<std::string, std::string> launch;

  // Expected peak host memory of one compile, for the daemon's compile memory budget.
  int64_t compile_memory_mb = 512;
};

const char* OriginName(SourceFile::Origin origin);  // "generated", "kernels", "request"

}  // namespace kiln::kernels
