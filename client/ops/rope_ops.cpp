// kiln::ops::apply_rope and kiln::ops::apply_rope_with_cos_sin_cache (kiln/ops/rope.h), and the
// path they share with the C ABI (rope_ops.h).
#include "client/ops/rope_ops.h"

#include "client/diag/call_trace.h"
#include "client/ops/rope_launcher.h"
#include "client/ops/rope_plan.h"
#include "kiln/ops.h"

namespace kiln::client {

Status ApplyRope(const char* api, const TensorView& q, const TensorView& k, const TensorView& positions,
                 const ops::RopeOptions& options, void* stream) {
  auto body = [&]() -> Status {
    auto plan = PlanApplyRope(q, k, positions, options, api);
    if (!plan.ok()) return plan.status();
    return RunRope(*plan, stream);
  };
  if (KILN_UNLIKELY(diag::Level() != 0))
    return diag::Traced("apply_rope", api, stream,
                        [&](diag::OpCall& c) {
                          c.InOut("q", q).InOut("k", k).In("positions", positions);
                          c.Param("rotary_dim", options.rotary_dim)
                              .Param("interleaved", options.interleaved)
                              .Param("theta", options.theta);
                          if (!options.llama31.has_value()) {
                            c.Param("llama31", std::string("none"));
                          } else {
                            c.Param("llama31_factor", options.llama31->factor)
                                .Param("llama31_low_freq_factor", options.llama31->low_freq_factor)
                                .Param("llama31_high_freq_factor", options.llama31->high_freq_factor)
                                .Param("llama31_original_max_position", options.llama31->original_max_position);
                          }
                        },
                        body);
  return body();
}

Status ApplyRopeWithCosSinCache(const char* api, const TensorView& q, const TensorView& k,
                                const TensorView& positions, const TensorView& cos_sin_cache,
                                bool interleaved, void* stream) {
  auto body = [&]() -> Status {
    auto plan = PlanApplyRopeWithCosSinCache(q, k, positions, cos_sin_cache, interleaved, api);
    if (!plan.ok()) return plan.status();
    return RunRope(*plan, stream);
  };
  if (KILN_UNLIKELY(diag::Level() != 0))
    return diag::Traced("apply_rope_with_cos_sin_cache", api, stream,
                        [&](diag::OpCall& c) {
                          c.InOut("q", q).InOut("k", k).In("positions", positions).In("cos_sin_cache", cos_sin_cache);
                          c.Param("interleaved", interleaved);
                        },
                        body);
  return body();
}

}  // namespace kiln::client

namespace kiln::ops {

Status apply_rope(const TensorView& q, const TensorView& k, const TensorView& positions,
                  const RopeOptions& options, void* stream) {
  return client::ApplyRope("kiln::ops::apply_rope", q, k, positions, options, stream);
}

Status apply_rope_with_cos_sin_cache(const TensorView& q, const TensorView& k, const TensorView& positions,
                                     const TensorView& cos_sin_cache, bool interleaved, void* stream) {
  return client::ApplyRopeWithCosSinCache("kiln::ops::apply_rope_with_cos_sin_cache", q, k, positions,
                                          cos_sin_cache, interleaved, stream);
}

}  // namespace kiln::ops
