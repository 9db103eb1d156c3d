#include "server/engine/artifact.h"

#include <nlohmann/json.hpp>

namespace kiln::server {

std::string KernelsToJson(const std::vector<KernelAttributes>& kernels) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& k : kernels) {
    out.push_back({{"name", k.name},
                   {"registers", k.registers},
                   {"static_shared_bytes", k.static_shared_bytes},
                   {"max_dynamic_shared_bytes", k.max_dynamic_shared_bytes},
                   {"max_threads_per_block", k.max_threads_per_block},
                   {"stack_bytes", k.stack_bytes},
                   {"spill_store_bytes", k.spill_store_bytes},
                   {"spill_load_bytes", k.spill_load_bytes},
                   {"const_bytes", k.const_bytes}});
  }
  return out.dump();
}

std::vector<KernelAttributes> KernelsFromJson(const std::string& json) {
  std::vector<KernelAttributes> out;
  auto parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return out;
  for (const auto& j : parsed) {
    KernelAttributes k;
    k.name = j.value("name", "");
    k.registers = j.value("registers", 0);
    k.static_shared_bytes = j.value("static_shared_bytes", 0);
    k.max_dynamic_shared_bytes = j.value("max_dynamic_shared_bytes", 0);
    k.max_threads_per_block = j.value("max_threads_per_block", 0);
    k.stack_bytes = j.value("stack_bytes", 0);
    k.spill_store_bytes = j.value("spill_store_bytes", 0);
    k.spill_load_bytes = j.value("spill_load_bytes", 0);
    k.const_bytes = j.value("const_bytes", 0);
    out.push_back(std::move(k));
  }
  return out;
}

std::string LaunchToJson(const std::vector<kernels::EntryLaunch>& launch) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& l : launch) {
    out.push_back({{"entry", l.entry},
                   {"block", l.block},
                   {"dynamic_smem", l.dynamic_smem},
                   {"items_per_block", l.items_per_block},
                   {"max_blocks", l.max_blocks}});
  }
  return out.dump();
}

std::vector<kernels::EntryLaunch> LaunchFromJson(const std::string& json) {
  std::vector<kernels::EntryLaunch> out;
  auto parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) return out;
  for (const auto& j : parsed) {
    if (!j.is_object()) continue;
    out.push_back({j.value("entry", ""), j.value("block", 0), j.value("dynamic_smem", 0), j.value("items_per_block", 0),
                   j.value("max_blocks", 0)});
  }
  return out;
}

}  // namespace kiln::server
