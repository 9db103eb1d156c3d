// NvrtcCompiler: one JitSpec + one arch → a cubin, with NVRTC straight to cubin, or per-unit
// -dlto LTO-IR linked by nvJitLink when the spec links device code. Sources come from memory
// (the spec's headers and units, and every file of the kernels tree snapshot under include/
// as an in-memory header named by its path below include/), so the bytes in the cache key
// are exactly the bytes compiled. Thread-safe: many compiles may run at once.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/jit/arch.h"
#include "kernels/jit/jit_spec.h"
#include "kernels/jit/kernel_tree.h"
#include "server/jit/kernel_attributes.h"
#include "server/jit/toolchain.h"

namespace kiln::server {

struct CompileRequest {
  const kernels::JitSpec* spec = nullptr;
  const kernels::TreeSnapshot* tree = nullptr;
  kernels::GpuArch arch;                   // already resolved against the spec's families
  std::vector<std::string> extra_options;  // diagnostics (-lineinfo, -G); part of the key
  bool verbose_log = false;                // keep ptxas -v output in the log
  std::string generated_dir;               // where the sources were materialized (for messages)
};

struct CompileResult {
  std::string cubin;
  std::string log;                        // NVRTC (+ nvJitLink) log, ptxas info included
  std::vector<KernelAttributes> kernels;  // one per spec entry, from ptxas' report
  double compile_ms = 0;                  // NVRTC, all units
  double link_ms = 0;                     // nvJitLink (0 on the direct path)
};

struct CompilerOptions {
  std::string cuda_include_dir;  // e.g. /usr/local/cuda/include (for cuda_bf16.h & co.)
  std::string pch_dir;           // per-process folder for -pch; empty disables PCH
};

class NvrtcCompiler {
 public:
  explicit NvrtcCompiler(CompilerOptions options);

  // The direct path (one unit, !spec.link): NVRTC --gpu-architecture=<arch>
  // --ptxas-options=-v → nvrtcGetCUBIN. The LTO path (several units, or spec.link): each
  // unit with -dlto -rdc=true → nvrtcGetLTOIR; nvJitLink -arch=<arch> -lto -Xptxas=-v plus
  // the spec's link options (and -lineinfo / -g for the extra options -lineinfo / -G) →
  // nvJitLinkGetLinkedCubin. Every spec entry must be a kernel of the result.
  //
  // Compile errors are INVALID_ARGUMENT for raw sources sent by a client and
  // FAILED_PRECONDITION for library ops (the library itself is broken), with a message that
  // names the URI, the arch, the generated folder and the first error lines of the log;
  // the full log is in the status payload "kiln.log" (read it with CompileLog()). A bad
  // request (no spec, no units, no arch) is INVALID_ARGUMENT; a toolchain failure that is
  // not about the code is INTERNAL.
  absl::StatusOr<CompileResult> Compile(const CompileRequest& request) const;

  // Each unit's PTX for the request's arch as a virtual target (sm_90a -> compute_90a), with the
  // options Compile uses (-rdc=true where the spec links units): what the device code's own
  // checks read (tests/kernels/programmatic_wait_test.cpp). Not cached and never served.
  absl::StatusOr<std::vector<std::string>> CompilePtx(const CompileRequest& request) const;

  // The options that define the output (what goes into the cache key, in order): the spec's
  // options, then the extra options, then "-dlto" when the spec takes the LTO path. Never
  // include paths, PCH or diagnostics-only options (--ptxas-options=-v).
  static std::vector<std::string> KeyOptions(const CompileRequest& request);

  // Whether `spec` compiles through LTO + nvJitLink.
  static bool UsesLinkPath(const kernels::JitSpec& spec);

  const Toolchain& toolchain() const { return toolchain_; }
  const CompilerOptions& options() const { return options_; }

 private:
  CompilerOptions options_;
  Toolchain toolchain_;
};

// The status payload type URL under which Compile puts the full compile log.
inline constexpr const char* kCompileLogPayload = "kiln.log";

// The full compile log carried by a status from Compile, if any.
std::optional<std::string> CompileLog(const absl::Status& status);

}  // namespace kiln::server
