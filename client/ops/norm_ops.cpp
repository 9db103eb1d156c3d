// kiln::ops::rms_norm and kiln::ops::fused_add_rms_norm (kiln/ops.h), and the path they share
// with the C ABI (norm_ops.h).
#include "client/ops/norm_ops.h"

#include "client/diag/call_trace.h"
#include "client/ops/norm_launcher.h"
#include "client/ops/norm_plan.h"
#include "kiln/ops.h"

namespace kiln::client {

Status RmsNormWithApi(const char* api, const TensorView& out, const TensorView& input, const TensorView& weight,
                      double eps, void* stream) {
  auto body = [&]() -> Status {
    auto plan = PlanRmsNorm(out, input, weight, eps, api);
    if (!plan.ok()) return plan.status();
    return RunNorm(*plan, stream);
  };
  if (KILN_UNLIKELY(diag::Level() != 0))
    return diag::Traced(
        "rms_norm", api, stream,
        [&](diag::OpCall& c) { c.Out("out", out).In("input", input).In("weight", weight).Param("eps", eps); }, body);
  return body();
}

Status FusedAddRmsNormWithApi(const char* api, const TensorView& input, const TensorView& residual,
                              const TensorView& weight, double eps, void* stream) {
  auto body = [&]() -> Status {
    auto plan = PlanFusedAddRmsNorm(input, residual, weight, eps, api);
    if (!plan.ok()) return plan.status();
    return RunNorm(*plan, stream);
  };
  if (KILN_UNLIKELY(diag::Level() != 0))
    return diag::Traced("fused_add_rms_norm", api, stream,
                        [&](diag::OpCall& c) {
                          c.InOut("input", input).InOut("residual", residual).In("weight", weight).Param("eps", eps);
                        },
                        body);
  return body();
}

}  // namespace kiln::client

namespace kiln::ops {

Status rms_norm(const TensorView& out, const TensorView& input, const TensorView& weight, double eps,
                void* stream) {
  return client::RmsNormWithApi("kiln::ops::rms_norm", out, input, weight, eps, stream);
}

Status fused_add_rms_norm(const TensorView& input, const TensorView& residual, const TensorView& weight,
                          double eps, void* stream) {
  return client::FusedAddRmsNormWithApi("kiln::ops::fused_add_rms_norm", input, residual, weight, eps, stream);
}

}  // namespace kiln::ops
