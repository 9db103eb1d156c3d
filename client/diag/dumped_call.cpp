#include "client/diag/dumped_call.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "client/core/api/invalid_argument.h"
#include "client/diag/call_dump.h"

namespace kiln::client::diag {
namespace {

using Json = nlohmann::ordered_json;  // keeps the params in call order

bool Exists(const std::string& path) {
  struct stat st = {};
  return ::stat(path.c_str(), &st) == 0;
}

std::optional<Role> RoleFromName(const std::string& name) {
  for (Role r : {Role::kInput, Role::kOutput, Role::kInOut})
    if (name == RoleName(r)) return r;
  return std::nullopt;
}

std::string Text(const Json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

Dim3 DimsFrom(const Json& j) {
  Dim3 d;
  if (j.is_array() && j.size() == 3) {
    d.x = j[0].get<unsigned>();
    d.y = j[1].get<unsigned>();
    d.z = j[2].get<unsigned>();
  }
  return d;
}

}  // namespace

int64_t DumpedTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

const std::string* DumpedCall::Param(const std::string& name) const {
  for (const auto& [k, v] : params)
    if (k == name) return &v;
  return nullptr;
}

const DumpedTensor* DumpedCall::Tensor(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

StatusOr<DumpedCall> ReadDumpedCall(const std::string& folder) {
  const std::string meta_path = folder + "/meta.json";
  std::ifstream in(meta_path);
  if (!in)
    return InvalidArgument(folder + " is not a call dump: cannot read " + meta_path + " (" + std::strerror(errno) +
                           ")");
  std::stringstream text;
  text << in.rdbuf();
  const Json meta = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) { return Status(StatusCode::kDataLoss, meta_path + ": " + what); };
  if (!meta.is_object()) return bad("not a JSON object (damaged?)");
  if (Text(meta, "format") != kDumpFormat)
    return InvalidArgument(meta_path + ": format '" + Text(meta, "format") + "' is not " + kDumpFormat +
                           " (a dump of another Kiln version?)");
  DumpedCall d;
  d.folder = folder;
  try {
    d.status = Text(meta, "status");
    d.op = Text(meta, "op");
    d.api = Text(meta, "api");
    if (d.op.empty()) return bad("no op");
    d.call = meta.value("call", uint64_t{0});
    d.pid = meta.value("pid", int64_t{0});
    d.time = Text(meta, "time");
    d.kiln_version = Text(meta, "kiln_version");
    if (meta.contains("params"))
      for (auto it = meta["params"].begin(); it != meta["params"].end(); ++it)
        d.params.emplace_back(it.key(), it.value().get<std::string>());
    for (const auto& t : meta.at("tensors")) {
      DumpedTensor dt;
      dt.name = Text(t, "name");
      auto role = RoleFromName(Text(t, "role"));
      auto dtype = DTypeFromName(Text(t, "dtype"));
      if (dt.name.empty() || !role || !dtype) return bad("tensor '" + dt.name + "' has no valid name, role or dtype");
      dt.role = *role;
      dt.dtype = *dtype;
      dt.shape = t.at("shape").get<std::vector<int64_t>>();
      dt.strides = t.at("strides").get<std::vector<int64_t>>();
      if (dt.shape.size() != dt.strides.size() || dt.shape.size() > static_cast<size_t>(kMaxTensorDims))
        return bad("tensor '" + dt.name + "': shape and strides of different or too many dims");
      dt.device = Text(t, "device");
      dt.pointer = std::strtoull(Text(t, "pointer").c_str(), nullptr, 16);
      d.tensors.push_back(std::move(dt));
    }
    if (meta.contains("kernels"))
      for (const auto& k : meta["kernels"]) {
        KernelChoice c;
        c.uri = Text(k, "uri");
        c.cache_key = Text(k, "cache_key");
        c.arch = Text(k, "arch");
        c.entry = Text(k, "entry");
        c.config.grid = DimsFrom(k.value("grid", Json()));
        c.config.block = DimsFrom(k.value("block", Json()));
        c.config.dynamic_smem_bytes = k.value("dynamic_smem", 0u);
        if (k.contains("cluster")) c.config.cluster = DimsFrom(k["cluster"]);
        c.backend = Text(k, "backend");
        d.kernels.push_back(std::move(c));
      }
    if (meta.contains("device")) {
      const Json& dev = meta["device"];
      d.device.name = Text(dev, "name");
      d.device.model = Text(dev, "model");
      d.device.arch = Text(dev, "arch");
      d.device.multiprocessors = dev.value("multiprocessors", 0);
    }
    if (meta.contains("environment"))
      for (auto it = meta["environment"].begin(); it != meta["environment"].end(); ++it)
        d.environment[it.key()] = it.value().get<std::string>();
    if (meta.contains("result"))
      d.result = std::make_pair(Text(meta["result"], "code"), Text(meta["result"], "message"));
  } catch (const std::exception& e) {
    return bad(std::string("unexpected content: ") + e.what());
  }

  const std::string inputs = folder + "/inputs.safetensors";
  if (Exists(inputs)) {
    KILN_ASSIGN_OR_RETURN(auto file, ReadSafetensors(inputs));
    d.inputs = std::move(file);
  } else {
    d.inputs_missing = "inputs.safetensors is missing (the process ended before the inputs were written)";
  }
  const std::string outputs = folder + "/outputs.safetensors";
  if (Exists(outputs)) {
    KILN_ASSIGN_OR_RETURN(auto file, ReadSafetensors(outputs));
    d.outputs = std::move(file);
  } else if (d.status != "completed") {
    d.outputs_missing = "the call never completed (status '" + d.status + "'): no outputs were recorded";
  } else if (d.result && d.result->first != "OK") {
    d.outputs_missing = "the call failed (" + d.result->first + "): no outputs were recorded";
  } else {
    d.outputs_missing = "outputs.safetensors is missing";
  }
  return d;
}

}  // namespace kiln::client::diag
