// The C ABI of the sampling ops (kiln/kiln.h, "Sampling"): DLTensor arguments in, kiln_status
// and kiln_last_error out; the same validation, logging and launch as kiln/ops/sampling.h,
// with the C names in messages.
#include <optional>

#include "client/capi/c_status.h"
#include "client/capi/dlpack_tensor.h"
#include "client/ops/sampling_launcher.h"
#include "client/ops/sampling_plan.h"
#include "kiln/kiln.h"

namespace {

using kiln::Status;
using kiln::TensorView;
using kiln::client::FromDLTensor;
using kiln::client::GuardC;
using kiln::client::SamplingArgs;
using kiln::client::SamplingOp;

// samples, probs and the optional per-row tensors as TensorViews, then the shared call.
Status SampleC(SamplingOp op, const char* api, const DLTensor* samples, const DLTensor* probs,
               const DLTensor* k_values, const char* k_name, int64_t k_scalar, const DLTensor* p_values,
               const char* p_name, double p_scalar, uint64_t seed, uint64_t offset, void* stream) {
  auto s = FromDLTensor(samples, "samples");
  if (!s.ok()) return s.status().WithContext(api);
  auto p = FromDLTensor(probs, "probs");
  if (!p.ok()) return p.status().WithContext(api);
  std::optional<TensorView> k_view, p_view;
  if (k_values != nullptr) {
    auto k = FromDLTensor(k_values, k_name);
    if (!k.ok()) return k.status().WithContext(api);
    k_view = *k;
  }
  if (p_values != nullptr) {
    auto v = FromDLTensor(p_values, p_name);
    if (!v.ok()) return v.status().WithContext(api);
    p_view = *v;
  }
  SamplingArgs args{&*s, &*p, k_view ? &*k_view : nullptr, k_scalar, p_view ? &*p_view : nullptr, p_scalar, seed,
                    offset};
  return kiln::client::SampleWithApi(op, args, api, stream);
}

}  // namespace

extern "C" {

kiln_status kiln_top_k_sampling(DLTensor* samples, const DLTensor* probs, const DLTensor* top_k,
                                int64_t top_k_scalar, uint64_t seed, uint64_t offset, void* stream) {
  const char* api = "kiln_top_k_sampling";
  return GuardC(api, [&] {
    return SampleC(SamplingOp::kTopK, api, samples, probs, top_k, "top_k", top_k_scalar, nullptr, "", 0, seed,
                   offset, stream);
  });
}

kiln_status kiln_top_p_sampling(DLTensor* samples, const DLTensor* probs, const DLTensor* top_p,
                                double top_p_scalar, uint64_t seed, uint64_t offset, void* stream) {
  const char* api = "kiln_top_p_sampling";
  return GuardC(api, [&] {
    return SampleC(SamplingOp::kTopP, api, samples, probs, nullptr, "", 0, top_p, "top_p", top_p_scalar, seed,
                   offset, stream);
  });
}

kiln_status kiln_top_k_top_p_sampling(DLTensor* samples, const DLTensor* probs, const DLTensor* top_k,
                                      int64_t top_k_scalar, const DLTensor* top_p, double top_p_scalar,
                                      uint64_t seed, uint64_t offset, void* stream) {
  const char* api = "kiln_top_k_top_p_sampling";
  return GuardC(api, [&] {
    return SampleC(SamplingOp::kTopKTopP, api, samples, probs, top_k, "top_k", top_k_scalar, top_p, "top_p",
                   top_p_scalar, seed, offset, stream);
  });
}

kiln_status kiln_min_p_sampling(DLTensor* samples, const DLTensor* probs, const DLTensor* min_p,
                                double min_p_scalar, uint64_t seed, uint64_t offset, void* stream) {
  const char* api = "kiln_min_p_sampling";
  return GuardC(api, [&] {
    return SampleC(SamplingOp::kMinP, api, samples, probs, nullptr, "", 0, min_p, "min_p", min_p_scalar, seed,
                   offset, stream);
  });
}

kiln_status kiln_argmax(DLTensor* samples, const DLTensor* probs, void* stream) {
  const char* api = "kiln_argmax";
  return GuardC(api, [&] {
    return SampleC(SamplingOp::kArgmax, api, samples, probs, nullptr, "", 0, nullptr, "", 0, 0, 0, stream);
  });
}

}  // extern "C"
