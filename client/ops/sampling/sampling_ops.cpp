// The sampling family's ops, top_k_sampling, top_p_sampling, top_k_top_p_sampling,
// min_p_sampling and argmax (kiln/ops/sampling.h): their entries in the op table, their launch,
// and their C++ and C APIs. Validation is sampling_plan.h's; the kernel contract
// kiln/sampling/sampling_contract.h.
#include <climits>

#include "client/core/api/invalid_argument.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/op_table.h"
#include "client/ops/sampling/sampling_plan.h"
#include "kiln/ops/sampling.h"
#include "kiln/sampling/sampling_contract.h"

namespace kiln::client {
namespace {

// One cubin per (op, samples' dtype, vec, blocks per row): rows and vocab are launch arguments.
struct SamplingSpec {
  DType out_dtype = DType::kInt32;
  int32_t vec = 1;
  int32_t cluster = 1;
  bool operator==(const SamplingSpec&) const = default;
  auto Fields() const { return std::tie(out_dtype, vec, cluster); }
  std::map<std::string, std::string> Params() const {
    return {{sampling::kParamOutDType, DTypeName(out_dtype)},
            {kParamVec, std::to_string(vec)},
            {sampling::kParamCluster, std::to_string(cluster)}};
  }
};

struct Sampler {
  SamplingOp op;
  const char* entry;
  OpKernels kernels;
  bool uses_k;
  const char* p_name;  // the per-request p of the op ("top_p", "min_p"), or null
};
const Sampler kTopK = {SamplingOp::kTopK,
                       sampling::kTopKEntry,
                       {sampling::kTopKOp, {{{.name = sampling::kTopKEntry, .min_block = 1, .waits_first = true}}}},
                       true,
                       nullptr};
const Sampler kTopP = {SamplingOp::kTopP,
                       sampling::kTopPEntry,
                       {sampling::kTopPOp, {{{.name = sampling::kTopPEntry, .min_block = 1, .waits_first = true}}}},
                       false,
                       "top_p"};
const Sampler kTopKTopP = {SamplingOp::kTopKTopP,
                           sampling::kTopKTopPEntry,
                           {sampling::kTopKTopPOp,
                            {{{.name = sampling::kTopKTopPEntry, .min_block = 1, .waits_first = true}}}},
                           true,
                           "top_p"};
const Sampler kMinP = {SamplingOp::kMinP,
                       sampling::kMinPEntry,
                       {sampling::kMinPOp, {{{.name = sampling::kMinPEntry, .min_block = 1, .waits_first = true}}}},
                       false,
                       "min_p"};
const Sampler kArgmax = {SamplingOp::kArgmax,
                         sampling::kArgmaxEntry,
                         {sampling::kArgmaxOp,
                          {{{.name = sampling::kArgmaxEntry, .min_block = 1, .waits_first = true}}}},
                         false,
                         nullptr};

// The arguments of sampler kS: samples and probs, then what the op takes of k, p and the seed.
template <const Sampler& kS>
struct SampleArgs {
  const TensorView* samples = nullptr;
  const TensorView* probs = nullptr;
  ops::PerRequestInt top_k;
  ops::PerRequestFloat p;
  ops::SamplingSeed seed;
  template <typename Self, typename V>
  static void Visit(Self& a, V& v) {
    v.Out("samples", a.samples).In("probs", a.probs);
    if (kS.uses_k) v.PerRequest("top_k", a.top_k);
    if (kS.p_name != nullptr) v.PerRequest(kS.p_name, a.p);
    if (kS.op != SamplingOp::kArgmax) v.Param("seed", a.seed.seed).Param("offset", a.seed.offset);
  }
};

// A validated call → one launch: a block per row, or a cluster of blocks per row for a small
// batch on sm_90+ (ChooseSamplingCluster).
template <const Sampler& kS>
Status RunSample(const SampleArgs<kS>& a, const char* api, void* stream) {
  const SamplingArgs plan_args{a.samples,  a.probs,    a.top_k.values, a.top_k.scalar,
                               a.p.values, a.p.scalar, a.seed.seed,    a.seed.offset};
  KILN_ASSIGN_OR_RETURN(const SamplingPlan plan, PlanSampling(kS.op, plan_args, api));
  if (plan.rows == 0) return OkStatus();  // nothing to do, and nothing to launch
  if (plan.rows > INT_MAX)
    return InvalidArgument(std::string(api) + ": " + std::to_string(plan.rows) +
                           " rows need more than 2^31-1 blocks (one per row); split the call");
  SamplingSpec spec;
  const auto spec_for = [&plan](const ContextInfo& ctx) {
    const int cluster = ChooseSamplingCluster(plan.rows, ctx.cc_major, ctx.multiprocessors,
                                              SamplingClusterFromEnvironment());
    return SamplingSpec{plan.out_dtype, plan.vec, cluster};
  };
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready, PrepareOpLaunchFor(kS.kernels, spec_for, plan.device, api, &spec));
  const EntryLaunchReady& e = ready.launch->entry();
  LaunchConfig config = EntryLaunchConfig(e, {static_cast<unsigned>(plan.rows * spec.cluster)}, stream);  // < 2^32
  if (spec.cluster > 1) config.cluster = {static_cast<unsigned>(spec.cluster), 1, 1};
  sampling::SamplingParams params = {plan.samples,  plan.probs,    plan.vocab,    plan.row_stride, plan.k_values,
                                     plan.k_scalar, plan.p_values, plan.p_scalar, plan.seed,       plan.offset};
  void* args[] = {&params};
  return LaunchFunction(*ready.driver, e.function, config, args, kS.entry, &ready.launch->library->info);
}

template <const Sampler& kS>
constexpr auto kInvoke = InvokeByVisit<SampleArgs<kS>, RunSample<kS>>;

const OpDescriptor kTopKSampling = {.name = "top_k_sampling",
                                    .op = sampling::kTopKOp,
                                    .family = "sampling",
                                    .cpp_api = "kiln::ops::top_k_sampling",
                                    .c_api = "kiln_top_k_sampling",
                                    .invoke = kInvoke<kTopK>};
const OpDescriptor kTopPSampling = {.name = "top_p_sampling",
                                    .op = sampling::kTopPOp,
                                    .family = "sampling",
                                    .cpp_api = "kiln::ops::top_p_sampling",
                                    .c_api = "kiln_top_p_sampling",
                                    .invoke = kInvoke<kTopP>};
const OpDescriptor kTopKTopPSampling = {.name = "top_k_top_p_sampling",
                                        .op = sampling::kTopKTopPOp,
                                        .family = "sampling",
                                        .cpp_api = "kiln::ops::top_k_top_p_sampling",
                                        .c_api = "kiln_top_k_top_p_sampling",
                                        .invoke = kInvoke<kTopKTopP>};
const OpDescriptor kMinPSampling = {.name = "min_p_sampling",
                                    .op = sampling::kMinPOp,
                                    .family = "sampling",
                                    .cpp_api = "kiln::ops::min_p_sampling",
                                    .c_api = "kiln_min_p_sampling",
                                    .invoke = kInvoke<kMinP>};
const OpDescriptor kArgmaxOp = {.name = "argmax",
                                .op = sampling::kArgmaxOp,
                                .family = "sampling",
                                .cpp_api = "kiln::ops::argmax",
                                .c_api = "kiln_argmax",
                                .invoke = kInvoke<kArgmax>};
KILN_REGISTER_OP(kTopKSampling);
KILN_REGISTER_OP(kTopPSampling);
KILN_REGISTER_OP(kTopKTopPSampling);
KILN_REGISTER_OP(kMinPSampling);
KILN_REGISTER_OP(kArgmaxOp);

template <const OpDescriptor& kOp, const Sampler& kS>
Status Call(SampleArgs<kS> args, void* stream) {
  return CallOp(kOp, kOp.cpp_api, args, stream, RunSample<kS>);
}

// The C function of sampler kS: samples and probs converted, the optional per-request tensors
// too (NULL: the scalar serves every row).
template <const OpDescriptor& kOp, const Sampler& kS>
kiln_status CallC(DLTensor* samples, const DLTensor* probs, const DLTensor* k, int64_t k_scalar, const DLTensor* p,
                  double p_scalar, uint64_t seed, uint64_t offset, void* stream) {
  return CallOpC(kOp, stream, RunSample<kS>, [&](CTensors& t) {
    SampleArgs<kS> a;
    a.samples = t.Tensor(samples, "samples");
    a.probs = t.Tensor(probs, "probs");
    a.top_k = {t.Optional(k, "top_k"), k_scalar};
    a.p = {t.Optional(p, kS.p_name != nullptr ? kS.p_name : "p"), p_scalar};
    a.seed = {seed, offset};
    return a;
  });
}

}  // namespace
}  // namespace kiln::client

namespace kiln::ops {

using namespace client;  // the op table's descriptors and samplers of this file

Status top_k_sampling(const TensorView& samples, const TensorView& probs, PerRequestInt top_k, SamplingSeed seed,
                      void* stream) {
  return Call<kTopKSampling, kTopK>({&samples, &probs, top_k, {}, seed}, stream);
}

Status top_p_sampling(const TensorView& samples, const TensorView& probs, PerRequestFloat top_p, SamplingSeed seed,
                      void* stream) {
  return Call<kTopPSampling, kTopP>({&samples, &probs, {}, top_p, seed}, stream);
}

Status top_k_top_p_sampling(const TensorView& samples, const TensorView& probs, PerRequestInt top_k,
                            PerRequestFloat top_p, SamplingSeed seed, void* stream) {
  return Call<kTopKTopPSampling, kTopKTopP>({&samples, &probs, top_k, top_p, seed}, stream);
}

Status min_p_sampling(const TensorView& samples, const TensorView& probs, PerRequestFloat min_p, SamplingSeed seed,
                      void* stream) {
  return Call<kMinPSampling, kMinP>({&samples, &probs, {}, min_p, seed}, stream);
}

Status argmax(const TensorView& samples, const TensorView& probs, void* stream) {
  return Call<kArgmaxOp, kArgmax>({&samples, &probs}, stream);
}

}  // namespace kiln::ops

extern "C" {

using namespace kiln::client;

kiln_status kiln_top_k_sampling(DLTensor* samples, const DLTensor* probs, const DLTensor* top_k, int64_t top_k_scalar,
                                uint64_t seed, uint64_t offset, void* stream) {
  return CallC<kTopKSampling, kTopK>(samples, probs, top_k, top_k_scalar, nullptr, 0, seed, offset, stream);
}

kiln_status kiln_top_p_sampling(DLTensor* samples, const DLTensor* probs, const DLTensor* top_p, double top_p_scalar,
                                uint64_t seed, uint64_t offset, void* stream) {
  return CallC<kTopPSampling, kTopP>(samples, probs, nullptr, 0, top_p, top_p_scalar, seed, offset, stream);
}

kiln_status kiln_top_k_top_p_sampling(DLTensor* samples, const DLTensor* probs, const DLTensor* top_k,
                                      int64_t top_k_scalar, const DLTensor* top_p, double top_p_scalar, uint64_t seed,
                                      uint64_t offset, void* stream) {
  return CallC<kTopKTopPSampling, kTopKTopP>(samples, probs, top_k, top_k_scalar, top_p, top_p_scalar, seed, offset,
                                             stream);
}

kiln_status kiln_min_p_sampling(DLTensor* samples, const DLTensor* probs, const DLTensor* min_p, double min_p_scalar,
                                uint64_t seed, uint64_t offset, void* stream) {
  return CallC<kMinPSampling, kMinP>(samples, probs, nullptr, 0, min_p, min_p_scalar, seed, offset, stream);
}

kiln_status kiln_argmax(DLTensor* samples, const DLTensor* probs, void* stream) {
  return CallC<kArgmaxOp, kArgmax>(samples, probs, nullptr, 0, nullptr, 0, 0, 0, stream);
}

}  // extern "C"
