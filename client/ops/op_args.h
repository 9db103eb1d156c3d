// An op's arguments, walked by its Args::Visit (client/ops/op_table.h) with one of these:
//
//   TraceWriter  describes a call for the call record (diag::OpCall): tensors with their roles,
//                scalars as canonical text, in API order
//   ArgReader    reads a call back from NamedArgs (a dumped call in `kiln replay`, a test's
//                arguments), naming what is missing or malformed
//
// and, for the C ABI, CTensors: the DLTensor arguments of one call as TensorViews.
#pragma once

#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/diag/op_call.h"
#include "kiln/ops/sampling.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// A call's arguments by name: tensors (an absent optional one is null) and scalar params as
// the call record writes them (diag::OpCall: "1e-06", "true", "42", "none").
class NamedArgs {
 public:
  virtual ~NamedArgs() = default;
  virtual const TensorView* Tensor(std::string_view name) const = 0;
  virtual const std::string* Param(std::string_view name) const = 0;
  // The device of the call.
  virtual int device() const = 0;
  // The bytes of an input as the call saw them, for an op that plans on the host from a tensor
  // (batch_decode's page table); null when there are none.
  virtual const std::vector<uint8_t>* HostBytes(std::string_view name) const { return nullptr; }
  // Device memory that lives as long as the call's tensors (a decode workspace).
  virtual StatusOr<void*> Scratch(size_t bytes) {
    return Status(StatusCode::kUnimplemented, "these arguments have no scratch memory");
  }
  // A note of the invoker about the reproduction (the decode plan made again).
  virtual void Note(std::string note) {}
};

// A replayed call's byte workspace (a param, not a tensor, in the records of the ops whose
// workspace is scratch: fused_moe, fused_moe_fp8): the arguments' own "workspace" tensor when they
// have one (a trace example), else `bytes` of fresh scratch on the call's device, viewed in *scratch.
StatusOr<const TensorView*> ReplayWorkspace(NamedArgs& named, int64_t bytes, TensorView* scratch);

class TraceWriter {
 public:
  explicit TraceWriter(diag::OpCall& call) : call_(call) {}
  TraceWriter& In(const char* name, const TensorView* t) { return Add(name, diag::Role::kInput, t); }
  TraceWriter& Out(const char* name, const TensorView* t) { return Add(name, diag::Role::kOutput, t); }
  TraceWriter& InOut(const char* name, const TensorView* t) { return Add(name, diag::Role::kInOut, t); }
  // A tensor that may be null: left out of the record when it is.
  TraceWriter& OptionalIn(const char* name, const TensorView* t) { return Add(name, diag::Role::kInput, t); }
  TraceWriter& OptionalOut(const char* name, const TensorView* t) { return Add(name, diag::Role::kOutput, t); }
  template <typename T>
  TraceWriter& Param(const char* name, const T& value) {
    call_.Param(name, value);
    return *this;
  }
  // A per-request parameter: its tensor when given, else its scalar as a param of that name.
  TraceWriter& PerRequest(const char* name, const ops::PerRequestInt& p);
  TraceWriter& PerRequest(const char* name, const ops::PerRequestFloat& p);
  // An optional group of params: "<name>" = "none" when absent, else the group's own params.
  template <typename T, typename Fields>
  TraceWriter& Optional(const char* name, const std::optional<T>& value, Fields&& fields) {
    if (!value.has_value()) return Param(name, std::string("none"));
    fields(*value, *this);
    return *this;
  }

 private:
  TraceWriter& Add(const char* name, diag::Role role, const TensorView* t) {
    if (t != nullptr) call_.Add(name, role, *t);  // a null tensor is the op's to refuse, by name
    return *this;
  }
  diag::OpCall& call_;
};

class ArgReader {
 public:
  explicit ArgReader(NamedArgs& args) : args_(args) {}
  ArgReader& In(const char* name, const TensorView*& t) { return Need(name, t); }
  ArgReader& Out(const char* name, const TensorView*& t) { return Need(name, t); }
  ArgReader& InOut(const char* name, const TensorView*& t) { return Need(name, t); }
  // An optional tensor the record does not have is null (it was not given).
  ArgReader& OptionalIn(const char* name, const TensorView*& t) {
    t = args_.Tensor(name);
    return *this;
  }
  ArgReader& OptionalOut(const char* name, const TensorView*& t) {
    t = args_.Tensor(name);
    return *this;
  }
  ArgReader& Param(const char* name, double& value);
  ArgReader& Param(const char* name, float& value);
  ArgReader& Param(const char* name, int64_t& value);
  ArgReader& Param(const char* name, int& value);
  ArgReader& Param(const char* name, uint64_t& value);
  ArgReader& Param(const char* name, bool& value);
  ArgReader& Param(const char* name, std::string& value);
  ArgReader& PerRequest(const char* name, ops::PerRequestInt& p);
  ArgReader& PerRequest(const char* name, ops::PerRequestFloat& p);
  template <typename T, typename Fields>
  ArgReader& Optional(const char* name, std::optional<T>& value, Fields&& fields) {
    const std::string* marker = args_.Param(name);
    if (marker != nullptr && *marker == "none") {
      value.reset();
      return *this;
    }
    value.emplace();
    fields(*value, *this);
    return *this;
  }

  // The first problem: INVALID_ARGUMENT "the call records no tensor 'out'", "... param 'eps' =
  // 'x' is not a number".
  const Status& status() const { return status_; }
  NamedArgs& args() { return args_; }

 private:
  ArgReader& Need(const char* name, const TensorView*& t);
  const std::string* Text(const char* name);
  void Fail(std::string message);
  NamedArgs& args_;
  Status status_;
};

// The DLTensor arguments of one C call as TensorViews (FromDLTensor: every field checked), kept
// here for the call; the first failure, named by the argument, is status().
class CTensors {
 public:
  const TensorView* Tensor(const DLTensor* t, const char* name);
  // NULL stays null (an optional argument: lse, per-request parameters).
  const TensorView* Optional(const DLTensor* t, const char* name) { return t == nullptr ? nullptr : Tensor(t, name); }
  const Status& status() const { return status_; }

 private:
  static constexpr int kMax = 12;
  std::array<TensorView, kMax> views_ = {};
  int count_ = 0;
  Status status_;
};

}  // namespace kiln::client
