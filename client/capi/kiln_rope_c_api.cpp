// The C ABI of the rope family (kiln/kiln.h): DLTensor arguments in, kiln_status and a
// thread-local message out, through the same path as kiln::ops::apply_rope*.
#include <optional>

#include "client/capi/c_status.h"
#include "client/capi/dlpack_tensor.h"
#include "client/ops/rope_ops.h"
#include "kiln/kiln.h"

namespace {

using kiln::client::FromDLTensor;
using kiln::client::GuardC;

}  // namespace

extern "C" {

kiln_status kiln_apply_rope(DLTensor* q, DLTensor* k, const DLTensor* positions, int64_t rotary_dim,
                            int interleaved, double theta, const kiln_llama31_rope_scaling* llama31,
                            void* stream) {
  constexpr const char* kApi = "kiln_apply_rope";
  return GuardC(kApi, [&]() -> kiln::Status {
    auto tq = FromDLTensor(q, "q");
    if (!tq.ok()) return tq.status().WithContext(kApi);
    auto tk = FromDLTensor(k, "k");
    if (!tk.ok()) return tk.status().WithContext(kApi);
    auto tp = FromDLTensor(positions, "positions");
    if (!tp.ok()) return tp.status().WithContext(kApi);
    kiln::ops::RopeOptions options;
    options.rotary_dim = rotary_dim;
    options.interleaved = interleaved != 0;
    options.theta = theta;
    if (llama31 != nullptr)
      options.llama31 = kiln::ops::Llama31RopeScaling{llama31->factor, llama31->low_freq_factor,
                                                      llama31->high_freq_factor, llama31->original_max_position};
    return kiln::client::ApplyRope(kApi, *tq, *tk, *tp, options, stream);
  });
}

kiln_status kiln_apply_rope_with_cos_sin_cache(DLTensor* q, DLTensor* k, const DLTensor* positions,
                                               const DLTensor* cos_sin_cache, int interleaved, void* stream) {
  constexpr const char* kApi = "kiln_apply_rope_with_cos_sin_cache";
  return GuardC(kApi, [&]() -> kiln::Status {
    auto tq = FromDLTensor(q, "q");
    if (!tq.ok()) return tq.status().WithContext(kApi);
    auto tk = FromDLTensor(k, "k");
    if (!tk.ok()) return tk.status().WithContext(kApi);
    auto tp = FromDLTensor(positions, "positions");
    if (!tp.ok()) return tp.status().WithContext(kApi);
    auto tc = FromDLTensor(cos_sin_cache, "cos_sin_cache");
    if (!tc.ok()) return tc.status().WithContext(kApi);
    return kiln::client::ApplyRopeWithCosSinCache(kApi, *tq, *tk, *tp, *tc, interleaved != 0, stream);
  });
}

}  // extern "C"
