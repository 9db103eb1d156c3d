#include "bench/op/routine.h"

#include <cstdio>
#include <cstdlib>

#include "client/core/api/invalid_argument.h"

namespace kiln::bench {

size_t TensorSpec::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

Tolerance ToleranceFor(const TensorSpec& t, DType dtype, bool cross) {
  if (!IsFloatDType(t.dtype)) return {0, 0};  // indices and counts: exact, whatever the case's dtype
  Tolerance tol = t.tolerance.abs > 0 || t.tolerance.rel > 0 ? t.tolerance : Float64Tolerance(dtype);
  if (cross) tol = {2 * tol.abs, 2 * tol.rel};
  return tol;
}

RoutineRegistry& RoutineRegistry::Global() {
  static RoutineRegistry* registry = new RoutineRegistry();
  return *registry;
}

bool RoutineRegistry::Add(std::unique_ptr<Routine> routine) {
  const std::string name(routine->name());
  if (!routines_.emplace(name, std::move(routine)).second) {
    std::fprintf(stderr, "kiln-bench: two routines are named '%s'\n", name.c_str());
    std::abort();
  }
  return true;
}

const Routine* RoutineRegistry::Find(std::string_view name) const {
  auto it = routines_.find(name);
  return it == routines_.end() ? nullptr : it->second.get();
}

std::vector<const Routine*> RoutineRegistry::All() const {
  std::vector<const Routine*> out;
  for (const auto& [name, routine] : routines_) out.push_back(routine.get());
  return out;
}

StatusOr<DType> ParseDType(std::string_view name) {
  if (std::optional<DType> d = DTypeFromName(name)) return *d;
  return client::InvalidArgument("dtype '" + std::string(name) +
                                 "' is not a dtype (fp32, fp16, bf16, fp8_e4m3, int8, uint8, int32, int64)");
}

bool HasBackend(const Routine& routine, std::string_view backend) {
  for (const auto& b : routine.backends())
    if (b.name == backend) return true;
  return false;
}

}  // namespace kiln::bench
