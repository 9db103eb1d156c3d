// The C ABI of the activation ops (kiln/kiln.h): DLTensor arguments in, kiln_status and a
// thread-local message out. No exception crosses it.
#include "client/capi/c_status.h"
#include "client/capi/dlpack_tensor.h"
#include "client/ops/activation_ops.h"
#include "kiln/kiln.h"

namespace {

using kiln::client::ActivationOp;
using kiln::client::GuardC;

kiln::Status RunActAndMulC(ActivationOp op, const char* api, const DLTensor* out, const DLTensor* input,
                           void* stream) {
  auto o = kiln::client::FromDLTensor(out, "out");
  if (!o.ok()) return o.status().WithContext(api);
  auto i = kiln::client::FromDLTensor(input, "input");
  if (!i.ok()) return i.status().WithContext(api);
  return kiln::client::ActAndMulWithApi(op, api, *o, *i, stream);
}

}  // namespace

extern "C" {

kiln_status kiln_silu_and_mul(DLTensor* out, const DLTensor* input, void* stream) {
  return GuardC("kiln_silu_and_mul", [&] {
    return RunActAndMulC(ActivationOp::kSiluAndMul, "kiln_silu_and_mul", out, input, stream);
  });
}

kiln_status kiln_gelu_and_mul(DLTensor* out, const DLTensor* input, void* stream) {
  return GuardC("kiln_gelu_and_mul", [&] {
    return RunActAndMulC(ActivationOp::kGeluAndMul, "kiln_gelu_and_mul", out, input, stream);
  });
}

kiln_status kiln_gelu_tanh_and_mul(DLTensor* out, const DLTensor* input, void* stream) {
  return GuardC("kiln_gelu_tanh_and_mul", [&] {
    return RunActAndMulC(ActivationOp::kGeluTanhAndMul, "kiln_gelu_tanh_and_mul", out, input, stream);
  });
}

}  // extern "C"
