// kiln::ops::top_k_sampling, top_p_sampling, top_k_top_p_sampling, min_p_sampling and argmax
// (kiln/ops/sampling.h).
#include "client/ops/sampling_launcher.h"
#include "client/ops/sampling_plan.h"
#include "kiln/ops.h"

namespace kiln::ops {

using client::SampleWithApi;
using client::SamplingArgs;
using client::SamplingOp;

Status top_k_sampling(const TensorView& samples, const TensorView& probs, PerRequestInt top_k,
                      SamplingSeed seed, void* stream) {
  SamplingArgs args{&samples, &probs, top_k.values, top_k.scalar, nullptr, 0, seed.seed, seed.offset};
  return SampleWithApi(SamplingOp::kTopK, args, "kiln::ops::top_k_sampling", stream);
}

Status top_p_sampling(const TensorView& samples, const TensorView& probs, PerRequestFloat top_p,
                      SamplingSeed seed, void* stream) {
  SamplingArgs args{&samples, &probs, nullptr, 0, top_p.values, top_p.scalar, seed.seed, seed.offset};
  return SampleWithApi(SamplingOp::kTopP, args, "kiln::ops::top_p_sampling", stream);
}

Status top_k_top_p_sampling(const TensorView& samples, const TensorView& probs, PerRequestInt top_k,
                            PerRequestFloat top_p, SamplingSeed seed, void* stream) {
  SamplingArgs args{&samples, &probs, top_k.values, top_k.scalar, top_p.values, top_p.scalar, seed.seed, seed.offset};
  return SampleWithApi(SamplingOp::kTopKTopP, args, "kiln::ops::top_k_top_p_sampling", stream);
}

Status min_p_sampling(const TensorView& samples, const TensorView& probs, PerRequestFloat min_p,
                      SamplingSeed seed, void* stream) {
  SamplingArgs args{&samples, &probs, nullptr, 0, min_p.values, min_p.scalar, seed.seed, seed.offset};
  return SampleWithApi(SamplingOp::kMinP, args, "kiln::ops::min_p_sampling", stream);
}

Status argmax(const TensorView& samples, const TensorView& probs, void* stream) {
  SamplingArgs args{&samples, &probs};
  return SampleWithApi(SamplingOp::kArgmax, args, "kiln::ops::argmax", stream);
}

}  // namespace kiln::ops
