// What every compile test needs: the kernels tree of the source checkout (read once, shared)
// and one NVRTC compiler over the toolkit's headers.
#pragma once

#include <memory>

#include "kernels/jit/kernel_tree.h"
#include "server/jit/nvrtc_compiler.h"

namespace kiln::kernels::compile_test {

std::shared_ptr<const TreeSnapshot> Tree();

const server::NvrtcCompiler& Compiler();

}  // namespace kiln::kernels::compile_test
