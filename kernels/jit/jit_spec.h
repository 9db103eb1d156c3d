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
  std::string name;  // file name inside the per-URI generation folder: "rmsnorm.cu"
  std::string content;
  Origin origin = Origin::kGenerated;
  std::string tree_path;  // for kKernels: path relative to the kernels folder
};

using Params = std::map<std::string, std::string>;

// The launch hints of one entry point (kiln/common/op_contract.h: the same fields for every
// op; the op's contract names the unit of items_per_block).
struct EntryLaunch {
  std::string entry;
  int block = 0;            // threads per block
  int dynamic_smem = 0;     // bytes of dynamic shared memory
  int items_per_block = 0;  // work one block covers (rows, columns, tokens, heads); 0: none
  int max_blocks = 0;       // the most blocks a launch may use; 0: no cap

  bool operator==(const EntryLaunch&) const = default;
};

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

  std::vector<std::string> entries;       // extern "C" __global__ names in the cubin
  std::vector<ArchFamily> arch_families;  // which targets this spec can be built for

  // How the client launches each entry: the shape the generator chose, which the client
  // cannot derive itself (its build may predate the daemon's kernels tree). One per entry that
  // has one (raw sources have none); sent as GetKernelResponse.launch.
  std::vector<EntryLaunch> launch;

  // Expected peak host memory of one compile, for the daemon's compile memory budget.
  int64_t compile_memory_mb = 512;
};

const char* OriginName(SourceFile::Origin origin);  // "generated", "kernels", "request"

}  // namespace kiln::kernels
