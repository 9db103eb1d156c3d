// kiln::ops::rms_norm and kiln::ops::fused_add_rms_norm (kiln/ops.h).
#include "client/ops/api_log.h"
#include "client/ops/norm_launcher.h"
#include "client/ops/norm_plan.h"
#include "kiln/ops.h"

namespace kiln::ops {

Status rms_norm(const TensorView& out, const TensorView& input, const TensorView& weight,
                double eps, void* stream) {
  if (client::ApiLogLevel() > 0)
    client::LogOpCall("kiln::ops::rms_norm", {{"out", &out}, {"input", &input}, {"weight", &weight}},
                      eps, stream);
  auto plan = client::PlanRmsNorm(out, input, weight, eps, "kiln::ops::rms_norm");
  if (!plan.ok()) return plan.status();
  return client::RunNorm(*plan, stream);
}

Status fused_add_rms_norm(const TensorView& input, const TensorView& residual,
                          const TensorView& weight, double eps, void* stream) {
  if (client::ApiLogLevel() > 0)
    client::LogOpCall("kiln::ops::fused_add_rms_norm",
                      {{"input", &input}, {"residual", &residual}, {"weight", &weight}}, eps,
                      stream);
  auto plan = client::PlanFusedAddRmsNorm(input, residual, weight, eps,
                                          "kiln::ops::fused_add_rms_norm");
  if (!plan.ok()) return plan.status();
  return client::RunNorm(*plan, stream);
}

}  // namespace kiln::ops
