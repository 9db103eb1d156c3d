// DumpedCall: one call dump folder (call_dump.h) read back — meta.json and the tensors of
// inputs.safetensors and outputs.safetensors — for `kiln replay`. Reading checks what replay
// relies on and names the file and field that is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/diag/op_call.h"
#include "client/diag/safetensors.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client::diag {

struct DumpedTensor {
  std::string name;
  Role role = Role::kInput;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  std::string device;    // as recorded: "cuda:0"
  uint64_t pointer = 0;  // the caller's address (its alignment shapes the kernel's vector width)
  int64_t numel() const;
};

struct DumpedDevice {
  std::string name;   // "cuda:0", "cpu"
  std::string model;  // "NVIDIA H200" ("" when unknown)
  std::string arch;   // "sm_90"
  int multiprocessors = 0;
};

struct DumpedCall {
  std::string folder;
  std::string status;  // "started" (the call never returned) or "completed"
  uint64_t call = 0;
  std::string op;
  std::string api;
  int64_t pid = 0;
  std::string time;
  std::string kiln_version;
  std::vector<std::pair<std::string, std::string>> params;
  std::vector<DumpedTensor> tensors;
  std::vector<KernelChoice> kernels;
  DumpedDevice device;
  std::map<std::string, std::string> environment;
  std::optional<std::pair<std::string, std::string>> result;  // code name, message
  std::optional<SafetensorsFile> inputs;                      // absent when the process died while writing them
  std::string inputs_missing;                                 // why inputs is absent
  std::optional<SafetensorsFile> outputs;                     // absent unless the call completed OK
  std::string outputs_missing;

  const std::string* Param(const std::string& name) const;  // null when not recorded
  const DumpedTensor* Tensor(const std::string& name) const;
};

// INVALID_ARGUMENT (not a dump folder, unknown format) or DATA_LOSS (a damaged file), naming
// the file. A missing inputs.safetensors is not an error here (see inputs_missing).
StatusOr<DumpedCall> ReadDumpedCall(const std::string& folder);

}  // namespace kiln::client::diag
