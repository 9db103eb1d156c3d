#include "tests/kernels/generator_fixture.h"

#include <memory>

namespace kiln::kernels::generator_test {

const TreeSnapshot& Tree() {
  static std::shared_ptr<const TreeSnapshot> snapshot = [] {
    auto tree = KernelTree::Open(KILN_TEST_KERNELS_DIR);
    REQUIRE(tree.ok());
    return (*tree)->Current();
  }();
  return *snapshot;
}

absl::StatusOr<JitSpec> Generate(const std::string& op, const Params& params) {
  return OpRegistry::Builtin().Generate(op, params, Tree());
}

JitSpec MustGenerate(const std::string& op, const Params& params) {
  auto spec = Generate(op, params);
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  return *spec;
}

}  // namespace kiln::kernels::generator_test
