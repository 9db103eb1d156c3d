// The activation family's ops, silu_and_mul, gelu_and_mul and gelu_tanh_and_mul
// (kiln/ops/activation.h): their entries in the op table, their launch, and their C++ and C
// APIs. Validation is activation_plan.h's; the kernel contract
// kiln/activation/activation_contract.h.
#include <climits>

#include "client/core/api/invalid_argument.h"
#include "client/core/loader/entry_launch_config.h"
#include "client/core/loader/kernel_launch.h"
#include "client/core/loader/launch_preparation.h"
#include "client/ops/activation/activation_plan.h"
#include "client/ops/op_table.h"
#include "kiln/activation/activation_contract.h"
#include "kiln/ops/activation.h"

namespace kiln::client {
namespace {

// One cubin per (op, dtype, vec): d and rows are launch arguments.
struct ActivationSpec {
  DType dtype = DType::kBFloat16;
  int32_t vec = 1;
  bool operator==(const ActivationSpec&) const = default;
  auto Fields() const { return std::tie(dtype, vec); }
  std::map<std::string, std::string> Params() const {
    return {{kParamDType, DTypeName(dtype)}, {kParamVec, std::to_string(vec)}};
  }
};

struct Activation {
  ActivationOp op;
  const char* entry;
  OpKernels kernels;
};
const Activation kSilu = {
    ActivationOp::kSiluAndMul,
    activation::kSiluAndMulEntry,
    {activation::kSiluAndMulOp,
     {{{.name = activation::kSiluAndMulEntry, .min_block = 1, .uses_items_per_block = true, .waits_first = true}}}}};
const Activation kGelu = {
    ActivationOp::kGeluAndMul,
    activation::kGeluAndMulEntry,
    {activation::kGeluAndMulOp,
     {{{.name = activation::kGeluAndMulEntry, .min_block = 1, .uses_items_per_block = true, .waits_first = true}}}}};
const Activation kGeluTanh = {ActivationOp::kGeluTanhAndMul,
                              activation::kGeluTanhAndMulEntry,
                              {activation::kGeluTanhAndMulOp,
                               {{{.name = activation::kGeluTanhAndMulEntry,
                                  .min_block = 1,
                                  .uses_items_per_block = true,
                                  .waits_first = true}}}}};

struct ActAndMulArgs {
  const TensorView* out = nullptr;
  const TensorView* input = nullptr;
  template <typename Self, typename V>
  static void Visit(Self& a, V& v) {
    v.Out("out", a.out).In("input", a.input);
  }
};

// A validated call → one launch: grid.x = rows * ceil(d / columns per block), the rule of the
// device code. The first call of an (op, dtype, vec, context) asks the daemon and loads; every
// later one, whatever its d and rows, is a cache lookup and cuLaunchKernelEx.
template <const Activation& kAct>
Status RunActAndMul(const ActAndMulArgs& a, const char* api, void* stream) {
  KILN_ASSIGN_OR_RETURN(const ActivationPlan plan, PlanActAndMul(kAct.op, *a.out, *a.input, api));
  if (plan.rows == 0) return OkStatus();  // nothing to do, and nothing to launch
  KILN_ASSIGN_OR_RETURN(const PreparedLaunch ready,
                        PrepareOpLaunch(kAct.kernels, ActivationSpec{plan.dtype, plan.vec}, plan.device, api));
  const EntryLaunchReady& e = ready.launch->entry();
  const int64_t chunks = (plan.d + e.items_per_block - 1) / e.items_per_block;
  if (plan.rows > INT_MAX / chunks)
    return InvalidArgument(std::string(api) + ": " + std::to_string(plan.rows) + " rows of d " +
                           std::to_string(plan.d) + " need more than 2^31-1 blocks (" + std::to_string(chunks) +
                           " per row); split the call");
  const LaunchConfig config = EntryLaunchConfig(e, {static_cast<unsigned>(plan.rows * chunks)}, stream);
  activation::ActAndMulParams params = {plan.out,        plan.input,    plan.rows, static_cast<int>(plan.d),
                                        plan.out_stride, plan.in_stride};
  void* args[] = {&params};
  return LaunchFunction(*ready.driver, e.function, config, args, kAct.entry, &ready.launch->library->info);
}

const OpDescriptor kSiluAndMul = {.name = "silu_and_mul",
                                  .op = activation::kSiluAndMulOp,
                                  .family = "activation",
                                  .cpp_api = "kiln::ops::silu_and_mul",
                                  .c_api = "kiln_silu_and_mul",
                                  .invoke = InvokeByVisit<ActAndMulArgs, RunActAndMul<kSilu>>};
const OpDescriptor kGeluAndMul = {.name = "gelu_and_mul",
                                  .op = activation::kGeluAndMulOp,
                                  .family = "activation",
                                  .cpp_api = "kiln::ops::gelu_and_mul",
                                  .c_api = "kiln_gelu_and_mul",
                                  .invoke = InvokeByVisit<ActAndMulArgs, RunActAndMul<kGelu>>};
const OpDescriptor kGeluTanhAndMul = {.name = "gelu_tanh_and_mul",
                                      .op = activation::kGeluTanhAndMulOp,
                                      .family = "activation",
                                      .cpp_api = "kiln::ops::gelu_tanh_and_mul",
                                      .c_api = "kiln_gelu_tanh_and_mul",
                                      .invoke = InvokeByVisit<ActAndMulArgs, RunActAndMul<kGeluTanh>>};
KILN_REGISTER_OP(kSiluAndMul);
KILN_REGISTER_OP(kGeluAndMul);
KILN_REGISTER_OP(kGeluTanhAndMul);

template <const OpDescriptor& kOp, const Activation& kAct>
Status Call(const TensorView& out, const TensorView& input, void* stream) {
  return CallOp(kOp, kOp.cpp_api, ActAndMulArgs{&out, &input}, stream, RunActAndMul<kAct>);
}

template <const OpDescriptor& kOp, const Activation& kAct>
kiln_status CallC(DLTensor* out, const DLTensor* input, void* stream) {
  return CallOpC(kOp, stream, RunActAndMul<kAct>, [&](CTensors& t) {
    return ActAndMulArgs{t.Tensor(out, "out"), t.Tensor(input, "input")};
  });
}

}  // namespace
}  // namespace kiln::client

namespace kiln::ops {

using client::kGelu, client::kGeluAndMul, client::kGeluTanh, client::kGeluTanhAndMul, client::kSilu,
    client::kSiluAndMul;

Status silu_and_mul(const TensorView& out, const TensorView& input, void* stream) {
  return client::Call<kSiluAndMul, kSilu>(out, input, stream);
}
Status gelu_and_mul(const TensorView& out, const TensorView& input, void* stream) {
  return client::Call<kGeluAndMul, kGelu>(out, input, stream);
}
Status gelu_tanh_and_mul(const TensorView& out, const TensorView& input, void* stream) {
  return client::Call<kGeluTanhAndMul, kGeluTanh>(out, input, stream);
}

}  // namespace kiln::ops

extern "C" {

kiln_status kiln_silu_and_mul(DLTensor* out, const DLTensor* input, void* stream) {
  using namespace kiln::client;
  return CallC<kSiluAndMul, kSilu>(out, input, stream);
}
kiln_status kiln_gelu_and_mul(DLTensor* out, const DLTensor* input, void* stream) {
  using namespace kiln::client;
  return CallC<kGeluAndMul, kGelu>(out, input, stream);
}
kiln_status kiln_gelu_tanh_and_mul(DLTensor* out, const DLTensor* input, void* stream) {
  using namespace kiln::client;
  return CallC<kGeluTanhAndMul, kGeluTanh>(out, input, stream);
}

}  // extern "C"
