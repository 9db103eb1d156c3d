// OpGenerator: turns an op's params into a JitSpec; OpRegistry: the one list of ops the daemon
// serves, filled by the generators themselves (KILN_REGISTER_OP_GENERATOR in their .cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/jit/arch.h"
#include "kernels/jit/jit_spec.h"
#include "kernels/jit/kernel_tree.h"
#include "kernels/jit/op_params.h"

namespace kiln::kernels {

class OpGenerator {
 public:
  virtual ~OpGenerator() = default;
  virtual std::string_view name() const = 0;    // "rmsnorm": the op, its URI prefix and trace
  virtual std::string_view family() const = 0;  // "norm": its contract, kiln/<family>/
  virtual std::string_view description() const = 0;
  // Every param, stated once: Generate checks a request against them before Build sees it.
  virtual std::vector<ParamInfo> params() const = 0;
  // The targets its specs can be built for (JitSpec::arch_families). Build may narrow them
  // for a spec whose params need a newer arch (sampling's cluster > 1: sm_90+), by setting
  // the spec's arch_families itself.
  virtual std::vector<ArchFamily> arch_families() const = 0;

  // INVALID_ARGUMENT naming the param, the bad value and what is allowed, for unknown,
  // missing or malformed params (ParseParams over params()); then Build. Deterministic: equal
  // params and tree give equal specs. Fills the spec's op, and its arch families unless Build did.
  absl::StatusOr<JitSpec> Generate(const Params& params, const TreeSnapshot& tree) const;

 protected:
  // The spec of checked params (every param of params() present, defaults filled in).
  // Sets the spec's URI, canonical params (every param, kAuto resolved), sources, options,
  // entries and launch hints.
  virtual absl::StatusOr<JitSpec> Build(const ParamValues& values, const TreeSnapshot& tree) const = 0;
};

class OpRegistry {
 public:
  // Every op whose generator registered itself (KILN_REGISTER_OP_GENERATOR), sorted by name.
  // Adding an op: its generator's .cpp under kernels/ops/<family>/ (kernels/CMakeLists.txt
  // picks it up; docs/adding-a-kernel.md).
  static const OpRegistry& Builtin();

  const OpGenerator* Find(std::string_view name) const;
  const std::vector<std::unique_ptr<OpGenerator>>& all() const { return ops_; }
  // NOT_FOUND naming the op and listing the known ones.
  absl::StatusOr<JitSpec> Generate(std::string_view name, const Params& params, const TreeSnapshot& tree) const;
  // The NOT_FOUND of an unknown op (GetKernel, ListOps): "unknown op 'x'; known ops: a, b".
  absl::Status UnknownOpError(std::string_view name) const;

  void Add(std::unique_ptr<OpGenerator> op);

  // For KILN_REGISTER_OP_GENERATOR: a factory run when Builtin() is first built.
  static bool Register(std::function<std::unique_ptr<OpGenerator>()> factory);

 private:
  std::vector<std::unique_ptr<OpGenerator>> ops_;
};

}  // namespace kiln::kernels

// In a generator's .cpp, at namespace scope: KILN_REGISTER_OP_GENERATOR(RmsNormGenerator, false);
// constructs the generator with the given arguments for the built-in registry. The library
// is linked whole (kernels/CMakeLists.txt), so a registration is never dropped by the linker.
#define KILN_OP_GENERATOR_CONCAT_(a, b) a##b
#define KILN_OP_GENERATOR_NAME_(line) KILN_OP_GENERATOR_CONCAT_(kiln_op_generator_registered_, line)
#define KILN_REGISTER_OP_GENERATOR(Type, ...)                                                                   \
  [[maybe_unused]] static const bool KILN_OP_GENERATOR_NAME_(__LINE__) = ::kiln::kernels::OpRegistry::Register( \
      [] { return std::unique_ptr<::kiln::kernels::OpGenerator>(new Type(__VA_ARGS__)); })
