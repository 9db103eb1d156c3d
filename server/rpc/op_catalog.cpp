#include "server/rpc/op_catalog.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

namespace kiln::server {
namespace {

namespace fs = std::filesystem;

// The op's trace definition, or "" when the folder has none. An unreadable file is logged and
// left out: discovery answers with what it has rather than failing on a data file.
std::string ReadTraceDefinition(const std::string& kernels_dir, std::string_view op) {
  const fs::path path = fs::path(kernels_dir) / "traces" / (std::string(op) + ".json");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "";
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  if (!file) {
    spdlog::warn("ListOps: cannot read {}; the reply leaves op {}'s trace definition out", path.string(), op);
    return "";
  }
  return std::move(text).str();
}

void Describe(const kernels::OpGenerator& op, const std::string& kernels_dir, v1::OpInfo* out) {
  out->set_name(std::string(op.name()));
  out->set_family(std::string(op.family()));
  out->set_description(std::string(op.description()));
  for (const kernels::ParamInfo& info : op.params()) ToWire(info, out->add_params());
  for (const kernels::ArchFamily& family : op.arch_families()) out->add_arch_families(family.name);
  out->set_trace_definition(ReadTraceDefinition(kernels_dir, op.name()));
}

}  // namespace

void ToWire(const kernels::ParamInfo& info, v1::ParamSpec* out) {
  out->set_name(info.name);
  out->set_help(info.help);
  const bool choice = info.kind == kernels::ParamInfo::Kind::kChoice;
  out->set_kind(choice ? v1::ParamSpec::KIND_CHOICE : v1::ParamSpec::KIND_INT);
  for (const auto& c : info.choices) out->add_choices(c);
  if (!choice) {
    out->set_min(info.min);
    out->set_max(info.max);
    out->set_power_of_two(info.power_of_two);
    out->set_even(info.even);
  }
  out->set_default_value(info.default_value);
  out->set_required(info.required());
  out->set_allowed(kernels::AllowedText(info));
}

absl::StatusOr<v1::ListOpsResponse> ListOps(const kernels::OpRegistry& registry, const std::string& kernels_dir,
                                            std::string_view name) {
  v1::ListOpsResponse response;
  if (!name.empty()) {
    const kernels::OpGenerator* op = registry.Find(name);
    if (op == nullptr) return registry.UnknownOpError(name);
    Describe(*op, kernels_dir, response.add_ops());
    return response;
  }
  std::vector<const kernels::OpGenerator*> ops;
  for (const auto& op : registry.all()) ops.push_back(op.get());
  std::sort(ops.begin(), ops.end(), [](const auto* a, const auto* b) { return a->name() < b->name(); });
  for (const kernels::OpGenerator* op : ops) Describe(*op, kernels_dir, response.add_ops());
  return response;
}

}  // namespace kiln::server
