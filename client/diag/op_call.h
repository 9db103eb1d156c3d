// OpCall: the record of one traced op call — the op as the public API names it, its tensors
// with their roles, its scalar params as canonical text, the stream — and what the launcher
// adds before each launch: the kernel chosen (module URI, cache key, arch, entry), its launch
// config and, where the op has a choice, the backend or tactic it took. Built only when call
// tracing is on (call_trace.h); the op entry points describe their call with the chainable
// setters below.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kernel.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client::diag {

enum class Role { kInput, kOutput, kInOut };
const char* RoleName(Role role);  // "input", "output", "inout"

struct CallTensor {
  std::string name;
  Role role = Role::kInput;
  TensorView view;
  bool IsInput() const { return role != Role::kOutput; }
  bool IsOutput() const { return role != Role::kInput; }
};

// One kernel launch of the call, as reported right before cuLaunchKernelEx.
struct KernelChoice {
  std::string uri;  // empty when the launch came without a module (never for ops)
  std::string cache_key;
  std::string arch;  // what the cubin was built for
  std::string entry;
  LaunchConfig config;
  std::string backend;  // the op's choice at this launch (split-KV schedule, algorithm), or ""
};

struct OpCall {
  std::string op;   // the short name replay knows it by: "rms_norm", "batch_decode", ...
  std::string api;  // the entry point called: "kiln::ops::rms_norm", "kiln_rms_norm", ...
  std::vector<CallTensor> tensors;
  std::vector<std::pair<std::string, std::string>> params;  // canonical text, in call order
  void* stream = nullptr;

  // Filled while tracing.
  uint64_t id = 0;  // process-wide call number, in log lines
  std::vector<KernelChoice> kernels;
  std::string backend;  // noted by the launcher before its next launch (NoteBackend)

  OpCall(std::string op_name, std::string api_name, void* call_stream)
      : op(std::move(op_name)), api(std::move(api_name)), stream(call_stream) {}

  OpCall& In(const char* name, const TensorView& t) { return Add(name, Role::kInput, t); }
  OpCall& Out(const char* name, const TensorView& t) { return Add(name, Role::kOutput, t); }
  OpCall& InOut(const char* name, const TensorView& t) { return Add(name, Role::kInOut, t); }
  OpCall& Add(const char* name, Role role, const TensorView& t) {
    tensors.push_back({name, role, t});
    return *this;
  }
  OpCall& Param(const char* name, std::string value) {
    params.emplace_back(name, std::move(value));
    return *this;
  }
  OpCall& Param(const char* name, double value);  // shortest text that reads back exactly
  OpCall& Param(const char* name, int64_t value);
  OpCall& Param(const char* name, uint64_t value);
  OpCall& Param(const char* name, int value) { return Param(name, static_cast<int64_t>(value)); }
  OpCall& Param(const char* name, bool value) { return Param(name, std::string(value ? "true" : "false")); }

  // The device of the call: that of its first CUDA tensor (else its first tensor's).
  Device CallDevice() const;
  // The bytes of every tensor as stored contiguously (what a dump of the call writes).
  int64_t TensorBytes() const;
};

// Canonical text of a double that parses back to the same value ("1e-06", "0.1", "inf").
std::string DoubleText(double value);
// The largest power of two dividing the address, capped at 256 ("256" for null).
int PointerAlignment(const void* p);
// "bf16[7, 4096] strides [4096, 1] cuda:0 @0x7f12a0000000 align=256".
std::string DescribeTensor(const TensorView& t);

}  // namespace kiln::client::diag
