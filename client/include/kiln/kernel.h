// The raw-kernel API: get a compiled kernel from kilnd — an op of the library by name and
// params, or your own CUDA C++ source — load it into this process and launch it with your
// own arguments. Modules are cached per process: asking again for the same op (or source)
// and arch returns the loaded module without an RPC.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/export.h"
#include "kiln/status.h"

namespace kiln {

namespace detail {
struct LoadedLibrary;
}

// An op of the kernel library: {"rmsnorm", {{"dtype", "bf16"}, {"hidden", "4096"}, ...}}.
struct OpRequest {
  std::string name;
  std::map<std::string, std::string> params;
};

struct SourceUnit {
  std::string name;  // [A-Za-z0-9_.-], ends in .cu
  std::string code;
};

// Your own CUDA C++ source. `entries` are extern "C" __global__ names; options come from the
// daemon's allow-list (-D..., -std=c++20, --use_fast_math, -lineinfo, ...); #include may name
// the kernels include folder and the CUDA headers only. Extra units are linked (LTO).
struct SourceRequest {
  std::string name;  // [A-Za-z0-9_]; becomes part of the URI
  std::string code;
  std::vector<std::string> entries;
  std::vector<std::string> options;
  std::vector<SourceUnit> extra_units;
};

// What ptxas reported for one kernel of the cubin.
struct KernelAttributes {
  std::string name;
  int registers = 0;
  int static_shared_bytes = 0;
  int max_dynamic_shared_bytes = 0;
  int max_threads_per_block = 0;
  int stack_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int const_bytes = 0;
};

// How to launch one entry of an op's module, as the op's generator chose (the daemon's kernels
// tree decides, not this library's build). The same fields for every op; the op's contract
// (kernels/include/kiln/<family>/<family>_contract.h) names the unit of items_per_block.
struct EntryLaunch {
  std::string entry;
  int block = 0;            // threads per block
  int dynamic_smem = 0;     // bytes of dynamic shared memory
  int items_per_block = 0;  // work one block covers (rows, columns, tokens, heads); 0: none
  int max_blocks = 0;       // the most blocks a launch may use; 0: no cap
};

// Where the daemon found the cubin.
enum class Origin {
  kUnspecified = 0,
  kMemory = 1,
  kDisk = 2,
  kPrebuilt = 3,
  kCompiled = 4,
  kRepository = 5,
  kRemote = 6,  // the fleet's shared cache on Redis (kilnd --remote-cache)
};
KILN_API const char* OriginName(Origin origin);  // "memory", "disk", "prebuilt", "compiled", "repository", "remote"

struct ModuleInfo {
  std::string uri;        // "rmsnorm_bf16_h4096" (a non-default vec adds "_v<N>")
  std::string cache_key;  // SHA-256 hex of everything that shapes the cubin
  std::string arch;       // what it was compiled for ("sm_90a")
  std::string sha256;     // of the cubin (verified before loading)
  uint64_t cubin_size = 0;
  Origin origin = Origin::kUnspecified;       // of the fetch that brought it into this process
  std::string job_id;                         // the compile job, when that fetch waited on one
  double daemon_ms = 0;                       // the daemon's time for that fetch
  double rpc_ms = 0;                          // this process: the GetKernel round trip
  double verify_ms = 0;                       // this process: blob read + SHA-256 check
  double load_ms = 0;                         // this process: cuLibraryLoadData + kernel lookups
  std::map<std::string, std::string> params;  // canonical op params (empty for sources)
  std::vector<EntryLaunch> launch;            // per entry, from the op generator (empty for sources)
  std::vector<KernelAttributes> kernels;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  unsigned dynamic_smem_bytes = 0;  // above 48 KiB the kernel is opted in automatically
  void* stream = nullptr;           // CUstream / cudaStream_t of the current context
  Dim3 cluster = {0, 0, 0};         // thread block cluster (sm_90+); 0: none
  // Programmatic dependent launch (sm_90+; CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION):
  // the kernel may start before the previous kernel on the stream has finished, once that one
  // has executed `griddepcontrol.launch_dependents` in every block. Only for a kernel that
  // executes `griddepcontrol.wait` before it touches memory earlier work may write or read.
  bool programmatic_dependent_launch = false;
};

// One entry point of a loaded module. Cheap to copy; keeps the module loaded while held.
// Launches go to the calling thread's current CUDA context (or, when none is current, the
// primary context of the device the module was loaded for); that context's device must be
// able to run the module's arch.
class KILN_API Kernel {
 public:
  Kernel() = default;
  explicit operator bool() const { return library_ != nullptr; }
  const std::string& name() const;
  const ModuleInfo& module_info() const;

  // `args[i]` points at the i-th kernel parameter (as for cuLaunchKernel).
  Status Launch(const LaunchConfig& config, void** args) const;

  // Launch with the parameters by value; their types must match the kernel's exactly
  // (pass `long long`, not `int`, where the kernel takes `long long`).
  template <typename... Args>
  Status operator()(const LaunchConfig& config, Args... args) const {
    void* pointers[] = {static_cast<void*>(&args)..., nullptr};
    return Launch(config, pointers);
  }

 private:
  friend class Module;
  std::shared_ptr<const detail::LoadedLibrary> library_;
  size_t entry_ = 0;
  int device_ = 0;
};

// A loaded cubin (a CUlibrary: valid in every context).
class KILN_API Module {
 public:
  Module() = default;
  explicit operator bool() const { return library_ != nullptr; }
  const ModuleInfo& info() const;
  std::vector<std::string> entries() const;
  StatusOr<Kernel> kernel(std::string_view entry) const;  // NOT_FOUND names the entries

 private:
  friend struct detail::LoadedLibrary;
  std::shared_ptr<const detail::LoadedLibrary> library_;
  int device_ = 0;  // where it launches when no context is current
};

struct LoadOptions {
  // The device to build for and load on: -1 means the current context's device, or device 0
  // when no context is current.
  int device = -1;
  // false: ask the daemon again and load its answer even when this process already loaded the
  // op or source; the new module replaces the cached one (modules still held stay valid). For
  // a kernel author who edits a kernel under a running process, and for measuring the fetch.
  bool reuse_loaded = true;
};

// Fetches (the daemon compiles on a miss), verifies and loads a module for the device's arch.
// Under KILN_DEBUG_COMPILE (a diagnostic control, docs/diagnostic-controls.md) these and
// Prefetch ask for that debug compile instead; KILN_LOADER_LOG=1 logs each fetch and load.
KILN_API StatusOr<Module> LoadOp(const OpRequest& op, const LoadOptions& options = {});
KILN_API StatusOr<Module> LoadSource(const SourceRequest& source, const LoadOptions& options = {});

// Asks the daemon for the cubin of an explicit arch ("sm_90a") without loading it: no GPU or
// driver needed. For warming the daemon's cache ahead of a roll-out.
KILN_API StatusOr<ModuleInfo> Prefetch(const OpRequest& op, const std::string& arch);
KILN_API StatusOr<ModuleInfo> Prefetch(const SourceRequest& source, const std::string& arch);

}  // namespace kiln
