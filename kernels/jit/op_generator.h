// OpGenerator: turns an op family's params into a JitSpec; OpRegistry: the one list of op
// families the daemon serves.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/jit/jit_spec.h"
#include "kernels/jit/kernel_tree.h"

namespace kiln::kernels {

struct ParamInfo {
  std::string name;
  std::string help;
  std::vector<std::string> choices;  // empty: free-form (validated by the generator)
  std::string default_value;         // empty: required
};

class OpGenerator {
 public:
  virtual ~OpGenerator() = default;
  virtual std::string_view name() const = 0;  // "rmsnorm"
  virtual std::string_view description() const = 0;
  virtual std::vector<ParamInfo> params() const = 0;
  // INVALID_ARGUMENT naming the param, the bad value and what is allowed, for unknown,
  // missing or malformed params. Deterministic: equal params and tree give equal specs.
  virtual absl::StatusOr<JitSpec> Generate(const Params& params,
                                           const TreeSnapshot& tree) const = 0;
};

class OpRegistry {
 public:
  // The built-in library. Adding an op family: its generator in op_registry.cpp and its .cpp in
  // kernels/CMakeLists.txt (docs/adding-a-kernel.md).
  static const OpRegistry& Builtin();

  const OpGenerator* Find(std::string_view name) const;
  const std::vector<std::unique_ptr<OpGenerator>>& all() const { return ops_; }
  // NOT_FOUND naming the op and listing the known ones.
  absl::StatusOr<JitSpec> Generate(std::string_view name, const Params& params,
                                   const TreeSnapshot& tree) const;

  void Add(std::unique_ptr<OpGenerator> op);

 private:
  std::vector<std::unique_ptr<OpGenerator>> ops_;
};

}  // namespace kiln::kernels
