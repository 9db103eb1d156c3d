// The op table: every op of the library declared once, by its family's file
// (KILN_REGISTER_OP), and what is derived from the declarations: the call record of a traced
// call (CallOp), `kiln replay` (each op's invoker), the diagnostics' and the tests' lists of
// ops, the C ABI check and the benchmark coverage check.
//
// An op declares an Args struct — its arguments as the API names them, tensors by pointer —
// with a Visit function that walks them in API order:
//
//   struct RmsNormArgs {
//     const TensorView* out = nullptr; const TensorView* input = nullptr; ...; double eps = 0;
//     template <class Self, class V> static void Visit(Self& a, V& v) {
//       v.Out("out", a.out).In("input", a.input).In("weight", a.weight).Param("eps", a.eps);
//     }
//   };
//
// The same walk describes a traced call (client/ops/op_args.h, TraceWriter) and reads a call
// back from its record (ArgReader), so the two never disagree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/core/capi/c_status.h"
#include "client/diag/call_trace.h"
#include "client/ops/op_args.h"
#include "kiln/status.h"

namespace kiln::client {

struct OpDescriptor {
  const char* name = "";     // "rms_norm": the API's short name; call logs, dumps and replay use it
  const char* op = "";       // "rmsnorm": the daemon's op, its trace definition, its kiln-bench routine
  const char* family = "";   // "norm": kernels/include/kiln/<family>/, client/ops/<family>/
  const char* cpp_api = "";  // "kiln::ops::rms_norm"
  const char* c_api = "";    // "kiln_rms_norm"
  // Calls the op through its public path (validation, call record, launch) with the arguments
  // of `args`; a missing tensor or param is INVALID_ARGUMENT naming it. Null for an op that one
  // process cannot call alone (a collective), which says why in `not_invokable`.
  Status (*invoke)(const OpDescriptor& self, NamedArgs& args, void* stream) = nullptr;
  const char* not_invokable = "";
  // The call needs a plan made on the host from the contents of its index arrays (batch_decode,
  // batch_prefill_*): `invoke` plans again from the recorded host bytes of those arrays, so a
  // call made from shapes alone (a trace example) is refused before it is recorded.
  bool planned_on_host = false;
};

// Every op of the library, sorted by name.
const std::vector<const OpDescriptor*>& AllOps();
// By name ("rms_norm"), or null.
const OpDescriptor* FindOp(std::string_view name);

// For KILN_REGISTER_OP; aborts on a second op of the same name.
bool RegisterOp(const OpDescriptor* op);

// Runs `run(args, api, stream)` as a call of `op` named `api` ("kiln::ops::rms_norm",
// "kiln_rms_norm"): with the diagnostics off that is one branch on a cached integer; on, the
// call is recorded (Args::Visit) and logged before anything runs.
template <typename Args, typename Run>
Status CallOp(const OpDescriptor& op, const char* api, const Args& args, void* stream, Run&& run) {
  if (KILN_UNLIKELY(diag::Level() != 0))
    return diag::Traced(
        op.name, api, stream,
        [&](diag::OpCall& call) {
          TraceWriter writer(call);
          Args::Visit(args, writer);
        },
        [&] { return run(args, api, stream); });
  return run(args, api, stream);
}

// The invoker of an op whose Args::Visit names every argument: reads them from `named`, then
// calls the op as its C++ API does (so the record names the C++ API).
template <typename Args, Status (*Run)(const Args&, const char*, void*)>
Status InvokeByVisit(const OpDescriptor& op, NamedArgs& named, void* stream) {
  Args args;
  ArgReader reader(named);
  Args::Visit(args, reader);
  KILN_RETURN_IF_ERROR(reader.status());
  return CallOp(op, op.cpp_api, args, stream, Run);
}

// The body of an op's C function: `build(CTensors&)` makes the op's Args from the C arguments
// (each DLTensor checked and named), then the op runs as CallOp runs it, under the C name; the
// status becomes kiln_status and kiln_last_error, and no exception crosses the ABI.
template <typename Run, typename Build>
kiln_status CallOpC(const OpDescriptor& op, void* stream, Run&& run, Build&& build) {
  return GuardC(op.c_api, [&]() -> Status {
    CTensors tensors;
    const auto args = build(tensors);
    KILN_RETURN_IF_ERROR(tensors.status().WithContext(op.c_api));
    return CallOp(op, op.c_api, args, stream, run);
  });
}

}  // namespace kiln::client

// At namespace scope in the op's file, after its descriptor: registers it in the op table.
// The client library is linked whole (client/CMakeLists.txt), so a registration is never
// dropped by the linker.
#define KILN_OP_TABLE_CONCAT_(a, b) a##b
#define KILN_OP_TABLE_NAME_(line) KILN_OP_TABLE_CONCAT_(kiln_op_registered_, line)
#define KILN_REGISTER_OP(descriptor) \
  [[maybe_unused]] static const bool KILN_OP_TABLE_NAME_(__LINE__) = ::kiln::client::RegisterOp(&(descriptor))
