// kiln::ops::silu_and_mul, gelu_and_mul and gelu_tanh_and_mul (kiln/ops/activation.h), and the
// path they share with the C ABI (activation_ops.h).
#include "client/ops/activation_ops.h"

#include "client/diag/call_trace.h"
#include "client/ops/activation_launcher.h"
#include "kiln/ops/activation.h"

namespace kiln::client {

Status ActAndMulWithApi(ActivationOp op, const char* api, const TensorView& out, const TensorView& input,
                        void* stream) {
  auto body = [&]() -> Status {
    auto plan = PlanActAndMul(op, out, input, api);
    if (!plan.ok()) return plan.status();
    return RunActAndMul(*plan, stream);
  };
  if (KILN_UNLIKELY(diag::Level() != 0))
    return diag::Traced(ActivationOpName(op), api, stream,
                        [&](diag::OpCall& c) { c.Out("out", out).In("input", input); }, body);
  return body();
}

}  // namespace kiln::client

namespace kiln::ops {

Status silu_and_mul(const TensorView& out, const TensorView& input, void* stream) {
  return client::ActAndMulWithApi(client::ActivationOp::kSiluAndMul, "kiln::ops::silu_and_mul", out, input, stream);
}

Status gelu_and_mul(const TensorView& out, const TensorView& input, void* stream) {
  return client::ActAndMulWithApi(client::ActivationOp::kGeluAndMul, "kiln::ops::gelu_and_mul", out, input, stream);
}

Status gelu_tanh_and_mul(const TensorView& out, const TensorView& input, void* stream) {
  return client::ActAndMulWithApi(client::ActivationOp::kGeluTanhAndMul, "kiln::ops::gelu_tanh_and_mul", out, input,
                                  stream);
}

}  // namespace kiln::ops
