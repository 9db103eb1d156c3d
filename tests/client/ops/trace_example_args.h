// The arguments of an op call made from its trace definition alone (kernels/traces/<op>.json),
// so that tests over every op of the op table need nothing written per op: every tensor the
// definition names, shaped and typed as one of its examples, on CUDA device 0 at an aligned
// address that is never dereferenced, and every scalar at its default (a param the definition
// does not name reads "none": an optional group left out). A call with them stops
// at validation or at the driver (no GPU) and never touches memory.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "client/ops/op_args.h"
#include "kernels/traces/trace_definition.h"
#include "kiln/tensor_view.h"

namespace kiln::client::testing {

class TraceExampleArgs final : public NamedArgs {
 public:
  // The definition's `example_index`-th example (its first by default). A tensor dtype the
  // example does not fix is the example's dtype when the tensor allows it, else its first.
  explicit TraceExampleArgs(const traces::TraceDefinition& def, size_t example_index = 0);

  const TensorView* Tensor(std::string_view name) const override;
  const std::string* Param(std::string_view name) const override;
  int device() const override { return 0; }

  // Replaces (or adds) one tensor or one param, for a test that breaks one argument.
  void SetTensor(const std::string& name, const TensorView& t) { tensors_[name] = t; }
  void RemoveTensor(const std::string& name) { tensors_.erase(name); }
  void SetParam(const std::string& name, std::string text) { params_[name] = std::move(text); }

  const std::map<std::string, TensorView, std::less<>>& tensors() const { return tensors_; }
  const std::string& example_name() const { return example_name_; }

 private:
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> params_;
  std::string example_name_;
};

// The definition of `op` ("rmsnorm": OpDescriptor::op), or null.
const traces::TraceDefinition* FindTraceDefinition(const std::vector<traces::TraceDefinition>& defs,
                                                   std::string_view op);

}  // namespace kiln::client::testing
