#include "tests/kernels/compile_fixture.h"

#include <catch2/catch.hpp>

namespace kiln::kernels::compile_test {

std::shared_ptr<const TreeSnapshot> Tree() {
  static std::shared_ptr<const TreeSnapshot> snapshot = [] {
    auto tree = KernelTree::Open(KILN_TEST_KERNELS_DIR);
    REQUIRE(tree.ok());
    return (*tree)->Current();
  }();
  return snapshot;
}

const server::NvrtcCompiler& Compiler() {
  static server::NvrtcCompiler compiler(server::CompilerOptions{KILN_TEST_CUDA_INCLUDE_DIR, ""});
  return compiler;
}

}  // namespace kiln::kernels::compile_test
