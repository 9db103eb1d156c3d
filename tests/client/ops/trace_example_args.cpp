#include "tests/client/ops/trace_example_args.h"

#include <cstdint>
#include <cstdio>
#include <optional>

namespace kiln::client::testing {
namespace {

// Tensor i lives at kBase + i * kSpacing: aligned for any vector width, far enough apart that no
// two example tensors overlap (the largest examples are a few GiB), and in the user half of
// the address space, so nothing treats it as a null or a kernel pointer.
constexpr uintptr_t kBase = uintptr_t{0x7f0000000000};
constexpr uintptr_t kSpacing = uintptr_t{1} << 36;

DType ExampleDType(const traces::TraceTensor& t, const std::string& example_dtype) {
  for (const std::string& allowed : t.dtypes)
    if (allowed == example_dtype) return *DTypeFromName(allowed);
  if (!t.dtypes.empty())
    if (std::optional<DType> d = DTypeFromName(t.dtypes.front())) return *d;
  return *DTypeFromName(example_dtype);
}

std::string DefaultText(const traces::TraceScalar& s) {
  if (s.dtype == "bool") return s.default_value != 0 ? "true" : "false";
  char text[64];
  if (s.dtype == "float32" || s.dtype == "float64") std::snprintf(text, sizeof text, "%.17g", s.default_value);
  else std::snprintf(text, sizeof text, "%lld", static_cast<long long>(s.default_value));
  return text;
}

}  // namespace

TraceExampleArgs::TraceExampleArgs(const traces::TraceDefinition& def, size_t example_index) {
  const traces::TraceExample& example = def.examples.at(example_index);
  example_name_ = example.name;
  const std::map<std::string, int64_t> axes = def.AxisValues(example);
  std::map<std::string, DType> dtypes;
  // Inputs first, then outputs that are not also inputs (an in-place tensor is listed in both).
  std::vector<const traces::TraceTensor*> order;
  for (const auto& t : def.inputs) order.push_back(&t);
  for (const auto& t : def.outputs) order.push_back(&t);
  uintptr_t next = kBase;
  for (int pass = 0; pass < 2; ++pass) {  // same_as names a tensor that may come later
    for (const traces::TraceTensor* t : order) {
      if (tensors_.count(t->name) != 0) continue;
      DType dtype;
      if (!t->same_as.empty()) {
        auto it = dtypes.find(t->same_as);
        if (it == dtypes.end()) continue;
        dtype = it->second;
      } else {
        dtype = ExampleDType(*t, example.dtype);
      }
      std::vector<int64_t> shape;
      for (const traces::TraceDim& dim : t->shape) shape.push_back(dim.axis.empty() ? dim.size : axes.at(dim.axis));
      TensorView view;
      view.data = reinterpret_cast<void*>(next);
      view.dtype = dtype;
      view.ndim = static_cast<int32_t>(shape.size());
      int64_t stride = 1;
      for (int i = view.ndim - 1; i >= 0; --i) {
        view.shape[i] = shape[static_cast<size_t>(i)];
        view.strides[i] = stride;
        stride *= shape[static_cast<size_t>(i)];
      }
      view.device = Device::CUDA(0);
      tensors_[t->name] = view;
      dtypes[t->name] = dtype;
      next += kSpacing;
    }
  }
  for (const traces::TraceScalar& s : def.scalars)
    if (s.has_default) params_[s.name] = DefaultText(s);
}

const TensorView* TraceExampleArgs::Tensor(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const std::string* TraceExampleArgs::Param(std::string_view name) const {
  // A param the definition does not name is an optional group the record marks and the
  // definition describes by its fields at their "absent" defaults (apply_rope's llama31:
  // llama31_factor 0), so the group is absent: "none".
  static const std::string kNone = "none";
  auto it = params_.find(name);
  return it == params_.end() ? &kNone : &it->second;
}

const traces::TraceDefinition* FindTraceDefinition(const std::vector<traces::TraceDefinition>& defs,
                                                   std::string_view op) {
  for (const auto& d : defs)
    if (d.name == op) return &d;
  return nullptr;
}

}  // namespace kiln::client::testing
