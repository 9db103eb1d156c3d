// kiln::ops::silu_and_mul, gelu_and_mul and gelu_tanh_and_mul (kiln/ops/activation.h).
#include <cmath>

#include "client/ops/activation_launcher.h"
#include "client/ops/activation_plan.h"
#include "client/ops/api_log.h"
#include "kiln/ops/activation.h"

namespace kiln::ops {
namespace {

Status Run(client::ActivationOp op, const char* api, const TensorView& out, const TensorView& input,
           void* stream) {
  if (client::ApiLogLevel() > 0) client::LogOpCall(api, {{"out", &out}, {"input", &input}}, NAN, stream);
  auto plan = client::PlanActAndMul(op, out, input, api);
  if (!plan.ok()) return plan.status();
  return client::RunActAndMul(*plan, stream);
}

}  // namespace

Status silu_and_mul(const TensorView& out, const TensorView& input, void* stream) {
  return Run(client::ActivationOp::kSiluAndMul, "kiln::ops::silu_and_mul", out, input, stream);
}

Status gelu_and_mul(const TensorView& out, const TensorView& input, void* stream) {
  return Run(client::ActivationOp::kGeluAndMul, "kiln::ops::gelu_and_mul", out, input, stream);
}

Status gelu_tanh_and_mul(const TensorView& out, const TensorView& input, void* stream) {
  return Run(client::ActivationOp::kGeluTanhAndMul, "kiln::ops::gelu_tanh_and_mul", out, input, stream);
}

}  // namespace kiln::ops
