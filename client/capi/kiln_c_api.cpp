// The C ABI (kiln/kiln.h): DLTensor arguments in, kiln_status and a thread-local message out.
// No exception crosses it.
#include "kiln/kiln.h"

#include <chrono>
#include <string>

#include "client/capi/c_status.h"
#include "client/capi/dlpack_tensor.h"
#include "client/ops/norm_ops.h"
#include "client/ops/norm_plan.h"
#include "kiln/client.h"

namespace {

using kiln::client::GuardC;

kiln::Status RunNormC(kiln::client::NormOp op, const char* api, const DLTensor* t0,
                      const char* n0, const DLTensor* t1, const char* n1, const DLTensor* weight,
                      double eps, void* stream) {
  auto a = kiln::client::FromDLTensor(t0, n0);
  if (!a.ok()) return a.status().WithContext(api);
  auto b = kiln::client::FromDLTensor(t1, n1);
  if (!b.ok()) return b.status().WithContext(api);
  auto w = kiln::client::FromDLTensor(weight, "weight");
  if (!w.ok()) return w.status().WithContext(api);
  return op == kiln::client::NormOp::kRmsNorm ? kiln::client::RmsNormWithApi(api, *a, *b, *w, eps, stream)
                                              : kiln::client::FusedAddRmsNormWithApi(api, *a, *b, *w, eps, stream);
}

}  // namespace

extern "C" {

const char* kiln_last_error(void) { return kiln::client::LastErrorC(); }

const char* kiln_status_name(kiln_status status) {
  if (status < KILN_OK || status > KILN_ERROR_UNKNOWN) return "UNKNOWN_STATUS";
  return kiln::StatusCodeName(static_cast<kiln::StatusCode>(status));
}

const char* kiln_version(void) { return kiln::Version(); }

kiln_status kiln_set_socket(const char* socket) {
  return GuardC("kiln_set_socket", [&] {
    kiln::ClientOptions options = kiln::CurrentOptions();
    options.socket = socket != nullptr ? socket : "";
    return kiln::Configure(options);
  });
}

kiln_status kiln_connect(const char* socket, int timeout_ms) {
  return GuardC("kiln_connect", [&] {
    kiln::ClientOptions options = kiln::CurrentOptions();
    options.socket = socket != nullptr ? socket : "";
    KILN_RETURN_IF_ERROR(kiln::Configure(options));
    return kiln::Ping(std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 5000));
  });
}

kiln_status kiln_rms_norm(DLTensor* out, const DLTensor* input, const DLTensor* weight,
                          double eps, void* stream) {
  return GuardC("kiln_rms_norm", [&] {
    return RunNormC(kiln::client::NormOp::kRmsNorm, "kiln_rms_norm", out, "out", input, "input",
                    weight, eps, stream);
  });
}

kiln_status kiln_fused_add_rms_norm(DLTensor* input, DLTensor* residual, const DLTensor* weight,
                                    double eps, void* stream) {
  return GuardC("kiln_fused_add_rms_norm", [&] {
    return RunNormC(kiln::client::NormOp::kFusedAddRmsNorm, "kiln_fused_add_rms_norm", input,
                    "input", residual, "residual", weight, eps, stream);
  });
}

}  // extern "C"
