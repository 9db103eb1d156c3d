#include "kernels/jit/op_generator.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln_base/status_macros.h"

namespace kiln::kernels {
namespace {

// Filled during static initialization by KILN_REGISTER_OP_GENERATOR (function-local: the
// registrations of other translation units may run before anything else of this one).
std::vector<std::function<std::unique_ptr<OpGenerator>()>>& Factories() {
  static auto* factories = new std::vector<std::function<std::unique_ptr<OpGenerator>()>>();
  return *factories;
}

}  // namespace

absl::StatusOr<JitSpec> OpGenerator::Generate(const Params& params, const TreeSnapshot& tree) const {
  const std::vector<ParamInfo> infos = this->params();
  KILN_ABSL_ASSIGN_OR_RETURN(const ParamValues values, ParseParams(name(), infos, params));
  KILN_ABSL_ASSIGN_OR_RETURN(JitSpec spec, Build(values, tree));
  spec.op = std::string(name());
  if (spec.arch_families.empty()) spec.arch_families = arch_families();  // else Build narrowed them
  // The canonical params are what the key and the client's check of a reply see: every param,
  // none left "auto" (a generator that forgets one is a bug, not bad input).
  for (const ParamInfo& info : infos) {
    auto it = spec.params.find(info.name);
    if (it == spec.params.end() || it->second == kAuto)
      return absl::InternalError(absl::StrCat(std::string(name()), ": the generator left param '", info.name,
                                              "' out of the spec's canonical params"));
  }
  return spec;
}

const OpRegistry& OpRegistry::Builtin() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    for (const auto& factory : Factories()) r->Add(factory());
    std::sort(r->ops_.begin(), r->ops_.end(), [](const auto& a, const auto& b) { return a->name() < b->name(); });
    return r;
  }();
  return *registry;
}

bool OpRegistry::Register(std::function<std::unique_ptr<OpGenerator>()> factory) {
  Factories().push_back(std::move(factory));
  return true;
}

const OpGenerator* OpRegistry::Find(std::string_view name) const {
  for (const auto& op : ops_) {
    if (op->name() == name) return op.get();
  }
  return nullptr;
}

absl::StatusOr<JitSpec> OpRegistry::Generate(std::string_view name, const Params& params,
                                             const TreeSnapshot& tree) const {
  const OpGenerator* op = Find(name);
  if (op == nullptr) return UnknownOpError(name);
  return op->Generate(params, tree);
}

absl::Status OpRegistry::UnknownOpError(std::string_view name) const {
  std::vector<std::string> known;
  for (const auto& o : ops_) known.emplace_back(o->name());
  return absl::NotFoundError(absl::StrCat("unknown op '", std::string(name),
                                          "'; known ops: ", known.empty() ? "(none)" : absl::StrJoin(known, ", ")));
}

void OpRegistry::Add(std::unique_ptr<OpGenerator> op) { ops_.push_back(std::move(op)); }

}  // namespace kiln::kernels
