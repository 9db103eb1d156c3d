// What every compile test needs: the kernels tree of the source checkout (read once, shared)
// and one NVRTC compiler over the toolkit's headers.
#pragma once

#include <memory>
#include <string>

#include "kernels/jit/jit_spec.h"
#include "kernels/jit/kernel_tree.h"
#include "server/jit/nvrtc_compiler.h"

namespace kiln::kernels::compile_test {

std::shared_ptr<const TreeSnapshot> Tree();

const server::NvrtcCompiler& Compiler();

// Generates `op` with `params`, resolves the spec for `arch_name` (which must resolve to itself)
// and compiles it; each step is REQUIREd, and the cubin checked to be an ELF file.
struct CompiledSpec {
  JitSpec spec;
  server::CompileResult result;
};
CompiledSpec GenerateAndCompile(const std::string& op, const Params& params, const std::string& arch_name);

// Appends a line that is not C++ to `header` (a path below kernels/, "include/kiln/...") and
// checks that compiling `op` with `params` for sm_90a then fails with FAILED_PRECONDITION, a
// message that names the spec's URI `uri` and the header, and the compiler log attached.
void CheckBrokenHeaderFailsWithLog(const std::string& op, const Params& params, const std::string& header,
                                   const std::string& uri);

}  // namespace kiln::kernels::compile_test
