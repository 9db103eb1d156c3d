// moe_route (kiln/ops/moe.h) and its C ABI refuse every bad argument before touching the driver,
// with a message naming the argument, what was expected and what was found; accepted calls
// plan the specialization (max_experts) and the kernel's parameters. No GPU: the pointers are
// fake and never dereferenced (validation fails, only the pure planning step runs, or there are
// no tokens).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "client/ops/moe/moe_plan.h"
#include "kiln/c_abi.h"
#include "kiln/ops/moe.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;
using kiln::client::MoeRouteArgs;
using kiln::client::PlanMoeRoute;
using kiln::ops::MoeRouteOptions;
using kiln::ops::MoeScoring;
using kiln::testing::RequireInvalid;

constexpr uintptr_t kLogits = 0x7f0000000000;  // 256-byte aligned fake device addresses
constexpr uintptr_t kIds = kLogits + (uintptr_t{1} << 32);
constexpr uintptr_t kWeights = kLogits + (uintptr_t{2} << 32);
constexpr uintptr_t kBias = kLogits + (uintptr_t{3} << 32);

void* At(uintptr_t address) { return reinterpret_cast<void*>(address); }

TensorView Logits(int64_t tokens, int64_t experts, DType dtype = DType::kBFloat16, uintptr_t address = kLogits) {
  return TensorView::Contiguous(At(address), dtype, {tokens, experts});
}
TensorView Ids(int64_t tokens, int64_t top_k, DType dtype = DType::kInt32, uintptr_t address = kIds) {
  return TensorView::Contiguous(At(address), dtype, {tokens, top_k});
}
TensorView Weights(int64_t tokens, int64_t top_k, DType dtype = DType::kFloat32, uintptr_t address = kWeights) {
  return TensorView::Contiguous(At(address), dtype, {tokens, top_k});
}
TensorView Bias(int64_t experts, DType dtype = DType::kFloat32) {
  return TensorView::Contiguous(At(kBias), dtype, {experts});
}

MoeRouteOptions DeepSeek() {
  MoeRouteOptions o;
  o.scoring = MoeScoring::kSigmoid;
  o.n_group = 8;
  o.topk_group = 4;
  o.routed_scaling_factor = 2.5;
  return o;
}

kiln::Status Route(const TensorView& ids, const TensorView& weights, const TensorView& logits,
                   const TensorView* bias = nullptr, const MoeRouteOptions& options = {}) {
  return kiln::ops::moe_route(ids, weights, logits, bias, options);
}

TEST_CASE("moe_route refuses logits that are not 2-D fp32, fp16 or bf16 with 1 to 256 experts",
          "[client][ops][validation][moe]") {
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), Logits(7, 8, DType::kInt32)),
                 "kiln::ops::moe_route: logits: expected dtype fp32, fp16 or bf16, found int32");
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), Logits(7, 8, DType::kFloat8E4M3)),
                 "logits: expected dtype fp32, fp16 or bf16, found fp8_e4m3");
  auto three = TensorView::Contiguous(At(kLogits), DType::kBFloat16, {7, 2, 8});
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), three),
                 "kiln::ops::moe_route: logits: expected a 2-D tensor [T, E], found rank 3 [7, 2, 8]");
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), Logits(7, 0)),
                 "logits: the number of experts (dim 1) must be 1 to 256, found 0 in shape [7, 0]");
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), Logits(7, 257)),
                 "logits: the number of experts (dim 1) must be 1 to 256, found 257 in shape [7, 257]");
  auto strided = TensorView::Strided(At(kLogits), DType::kBFloat16, {7, 8}, {16, 2});
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), strided), "logits: the last dim must be contiguous (stride 1)");
  auto cpu = TensorView::Contiguous(At(kLogits), DType::kBFloat16, {7, 8}, Device::CPU());
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), cpu), "logits: expected a CUDA device tensor, found one on cpu");
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), Logits(7, 8, DType::kBFloat16, kLogits + 1)),
                 "logits: data pointer 0x7f0000000001 is not aligned to 2 bytes");
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), Logits(7, 8, DType::kBFloat16, 0)),
                 "logits: data is NULL, but the tensor [7, 8] is not empty");
}

TEST_CASE("moe_route refuses outputs of the wrong dtype, rank or shape", "[client][ops][validation][moe]") {
  RequireInvalid(Route(Ids(7, 2, DType::kInt64), Weights(7, 2), Logits(7, 8)),
                 "kiln::ops::moe_route: topk_ids: expected dtype int32, found int64");
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2, DType::kBFloat16), Logits(7, 8)),
                 "topk_weights: expected dtype fp32, found bf16");
  auto flat = TensorView::Contiguous(At(kIds), DType::kInt32, {14});
  RequireInvalid(Route(flat, Weights(7, 2), Logits(7, 8)),
                 "topk_ids: expected a 2-D tensor [T, top_k], found rank 1 [14]");
  auto three = TensorView::Contiguous(At(kWeights), DType::kFloat32, {7, 2, 1});
  RequireInvalid(Route(Ids(7, 2), three, Logits(7, 8)),
                 "topk_weights: expected a 2-D tensor [T, top_k], found rank 3 [7, 2, 1]");
  RequireInvalid(Route(Ids(6, 2), Weights(7, 2), Logits(7, 8)),
                 "topk_ids: expected 7 rows (logits' tokens), found shape [6, 2]");
  RequireInvalid(Route(Ids(7, 2), Weights(8, 2), Logits(7, 8)),
                 "topk_weights: expected 7 rows (logits' tokens), found shape [8, 2]");
  RequireInvalid(Route(Ids(7, 2), Weights(7, 3), Logits(7, 8)),
                 "topk_weights: expected shape [7, 2] (topk_ids'), found [7, 3]");
  auto strided = TensorView::Strided(At(kIds), DType::kInt32, {7, 2}, {4, 2});
  RequireInvalid(Route(strided, Weights(7, 2), Logits(7, 8)), "topk_ids: the last dim must be contiguous (stride 1)");
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2, DType::kFloat32, kWeights + 2), Logits(7, 8)),
                 "topk_weights: data pointer 0x7f0200000002 is not aligned to 4 bytes");
  auto elsewhere = TensorView::Contiguous(At(kIds), DType::kInt32, {7, 2}, Device::CUDA(1));
  RequireInvalid(Route(elsewhere, Weights(7, 2), Logits(7, 8)),
                 "topk_ids: on cuda:1, but logits is on cuda:0; all tensors must be on one device");
}

TEST_CASE("moe_route refuses a top_k beyond E or 16", "[client][ops][validation][moe]") {
  RequireInvalid(Route(Ids(7, 9), Weights(7, 9), Logits(7, 8)),
                 "kiln::ops::moe_route: topk_ids: top_k (dim 1) = 9 exceeds the 8 experts of logits [7, 8]");
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), Logits(7, 1)),
                 "topk_ids: top_k (dim 1) = 2 exceeds the 1 experts of logits [7, 1]");
  RequireInvalid(Route(Ids(7, 17), Weights(7, 17), Logits(7, 256)),
                 "topk_ids: top_k (dim 1) must be 1 to 16, found 17");
  RequireInvalid(Route(Ids(7, 0), Weights(7, 0), Logits(7, 8)), "topk_ids: top_k (dim 1) must be 1 to 16, found 0");
}

TEST_CASE("moe_route refuses a correction bias of the wrong dtype, shape or place", "[client][ops][validation][moe]") {
  const TensorView half = Bias(256, DType::kBFloat16);
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &half, DeepSeek()),
                 "kiln::ops::moe_route: correction_bias: expected dtype fp32, found bf16");
  const TensorView short_bias = Bias(128);
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &short_bias, DeepSeek()),
                 "correction_bias: expected shape [256] (logits' experts), found [128]");
  const TensorView two = TensorView::Contiguous(At(kBias), DType::kFloat32, {1, 256});
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &two, DeepSeek()),
                 "correction_bias: expected a 1-D tensor [E] = [256], found rank 2 [1, 256]");
  const TensorView strided = TensorView::Strided(At(kBias), DType::kFloat32, {256}, {2});
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &strided, DeepSeek()),
                 "correction_bias: the last dim must be contiguous (stride 1)");
  const TensorView host = TensorView::Contiguous(At(kBias), DType::kFloat32, {256}, Device::CPU());
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &host, DeepSeek()),
                 "correction_bias: expected a CUDA device tensor, found one on cpu");
}

TEST_CASE("moe_route refuses outputs overlapping the inputs or each other", "[client][ops][validation][moe]") {
  RequireInvalid(Route(Ids(7, 2, DType::kInt32, kLogits), Weights(7, 2), Logits(7, 8)),
                 "topk_ids and logits overlap in memory");
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2, DType::kFloat32, kIds + 8), Logits(7, 8)),
                 "topk_ids and topk_weights overlap in memory");
  const TensorView bias = Bias(8);
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2, DType::kFloat32, kBias), Logits(7, 8), &bias),
                 "topk_weights and correction_bias overlap in memory");
}

TEST_CASE("moe_route refuses a scoring, group limit or scaling factor it cannot apply",
          "[client][ops][validation][moe]") {
  const TensorView bias = Bias(256);
  MoeRouteOptions o = DeepSeek();
  o.scoring = static_cast<MoeScoring>(2);
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &bias, o),
                 "kiln::ops::moe_route: scoring: expected 0 (softmax) or 1 (sigmoid), found 2");
  o = DeepSeek();
  o.n_group = 0;
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &bias, o),
                 "n_group: expected 1 (no group limit) to 32, found 0");
  o.n_group = 64;
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &bias, o),
                 "n_group: expected 1 (no group limit) to 32, found 64");
  o.n_group = 3;
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &bias, o),
                 "n_group: must divide the 256 experts, found 3");
  o = DeepSeek();
  o.topk_group = 9;
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &bias, o),
                 "topk_group: expected 1 to n_group = 8, found 9");
  o.topk_group = 0;
  RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &bias, o),
                 "topk_group: expected 1 to n_group = 8, found 0");
  MoeRouteOptions plain;
  plain.topk_group = 2;
  RequireInvalid(Route(Ids(7, 2), Weights(7, 2), Logits(7, 8), nullptr, plain),
                 "topk_group: expected 1 to n_group = 1, found 2");
  // DeepSeek-V3's groups of 32 keep 4 * 32 = 128 experts; 8 groups of 2 keeping 1 keep 2.
  o = DeepSeek();
  o.n_group = 4;
  o.topk_group = 1;
  RequireInvalid(Route(Ids(7, 3), Weights(7, 3), Logits(7, 8), nullptr, o),
                 "topk_ids: top_k (dim 1) = 3 exceeds the 2 experts of the kept groups (topk_group 1 of n_group 4 "
                 "groups of 2)");
  for (double scale : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    o = DeepSeek();
    o.routed_scaling_factor = scale;
    RequireInvalid(Route(Ids(7, 8), Weights(7, 8), Logits(7, 256), &bias, o),
                   "routed_scaling_factor: expected a finite value > 0, found ");
  }
}

TEST_CASE("moe_route plans the smallest specialization and the kernel's parameters", "[client][ops][moe]") {
  CHECK(kiln::client::MaxExpertsFor(1) == 32);
  CHECK(kiln::client::MaxExpertsFor(32) == 32);
  CHECK(kiln::client::MaxExpertsFor(33) == 64);
  CHECK(kiln::client::MaxExpertsFor(128) == 128);
  CHECK(kiln::client::MaxExpertsFor(129) == 256);
  CHECK(kiln::client::MaxExpertsFor(256) == 256);

  // DeepSeek-V3 with padded logits rows and padded outputs.
  const TensorView logits = TensorView::Strided(At(kLogits), DType::kFloat32, {5, 256}, {300, 1});
  const TensorView ids = TensorView::Strided(At(kIds), DType::kInt32, {5, 8}, {16, 1});
  const TensorView weights = TensorView::Strided(At(kWeights), DType::kFloat32, {5, 8}, {12, 1});
  const TensorView bias = Bias(256);
  MoeRouteArgs a;
  a.topk_ids = &ids;
  a.topk_weights = &weights;
  a.logits = &logits;
  a.correction_bias = &bias;
  a.scoring = 1;
  a.n_group = 8;
  a.topk_group = 4;
  a.routed_scaling_factor = 2.5;
  auto plan = PlanMoeRoute(a, "test");
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CHECK(plan->dtype == DType::kFloat32);
  CHECK(plan->sigmoid);
  CHECK(plan->max_experts == 256);
  CHECK(plan->params.tokens == 5);
  CHECK(plan->params.experts == 256);
  CHECK(plan->params.top_k == 8);
  CHECK(plan->params.logits_stride == 300);
  CHECK(plan->params.ids_stride == 16);
  CHECK(plan->params.weights_stride == 12);
  CHECK(plan->params.n_group == 8);
  CHECK(plan->params.topk_group == 4);
  CHECK(plan->params.renormalize == 1);
  CHECK(plan->params.routed_scaling_factor == 2.5);
  CHECK(plan->params.correction_bias == At(kBias));

  // Mixtral: softmax, no bias, E = 8 in the smallest class; top_k = E is allowed.
  const TensorView mixtral = Logits(3, 8);
  const TensorView ids8 = Ids(3, 8), weights8 = Weights(3, 8);
  MoeRouteArgs m;
  m.topk_ids = &ids8;
  m.topk_weights = &weights8;
  m.logits = &mixtral;
  m.renormalize = false;
  auto mplan = PlanMoeRoute(m, "test");
  REQUIRE(mplan.ok());
  CHECK(!mplan->sigmoid);
  CHECK(mplan->max_experts == 32);
  CHECK(mplan->dtype == DType::kBFloat16);
  CHECK(mplan->params.correction_bias == nullptr);
  CHECK(mplan->params.renormalize == 0);
  CHECK(mplan->params.n_group == 1);
}

TEST_CASE("moe_route with no tokens is OK without a launch", "[client][ops][moe]") {
  const TensorView logits = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 128});
  const TensorView ids = TensorView::Contiguous(nullptr, DType::kInt32, {0, 8});
  const TensorView weights = TensorView::Contiguous(nullptr, DType::kFloat32, {0, 8});
  CHECK(kiln::ops::moe_route(ids, weights, logits, nullptr, {}).ok());
  // Still validated: a top_k beyond E is refused with no tokens too.
  const TensorView ids9 = TensorView::Contiguous(nullptr, DType::kInt32, {0, 9});
  const TensorView weights9 = TensorView::Contiguous(nullptr, DType::kFloat32, {0, 9});
  const TensorView logits8 = TensorView::Contiguous(nullptr, DType::kBFloat16, {0, 8});
  RequireInvalid(kiln::ops::moe_route(ids9, weights9, logits8, nullptr, {}), "exceeds the 8 experts");
}

// --- The C ABI ---

struct DLCall {
  int64_t logits_shape[2] = {7, 256};
  int64_t out_shape[2] = {7, 8};
  int64_t bias_shape[1] = {256};
  DLTensor logits{}, ids{}, weights{}, bias{};
  DLCall() {
    logits.data = At(kLogits);
    logits.device = {kDLCUDA, 0};
    logits.ndim = 2;
    logits.dtype = {kDLBfloat, 16, 1};
    logits.shape = logits_shape;
    ids = logits;
    ids.data = At(kIds);
    ids.dtype = {kDLInt, 32, 1};
    ids.shape = out_shape;
    weights = ids;
    weights.data = At(kWeights);
    weights.dtype = {kDLFloat, 32, 1};
    bias = logits;
    bias.data = At(kBias);
    bias.ndim = 1;
    bias.dtype = {kDLFloat, 32, 1};
    bias.shape = bias_shape;
  }
};

void RequireInvalidC(kiln_status status, const std::string& fragment) {
  const std::string error = kiln_last_error();
  INFO(error);
  REQUIRE(status == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(error.rfind("kiln_moe_route: ", 0) == 0);
  CHECK(error.find(fragment) != std::string::npos);
}

TEST_CASE("the moe_route C ABI checks DLTensors and options like the C++ API", "[client][capi][moe]") {
  DLCall t;
  RequireInvalidC(kiln_moe_route(nullptr, &t.weights, &t.logits, &t.bias, KILN_MOE_SCORING_SIGMOID, 1, 8, 4, 2.5,
                                 nullptr),
                  "topk_ids: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_route(&t.ids, nullptr, &t.logits, &t.bias, KILN_MOE_SCORING_SIGMOID, 1, 8, 4, 2.5, nullptr),
                  "topk_weights: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_route(&t.ids, &t.weights, nullptr, &t.bias, KILN_MOE_SCORING_SIGMOID, 1, 8, 4, 2.5, nullptr),
                  "logits: the DLTensor pointer is NULL");
  RequireInvalidC(kiln_moe_route(&t.ids, &t.weights, &t.logits, &t.bias, static_cast<kiln_moe_scoring>(7), 1, 8, 4, 2.5,
                                 nullptr),
                  "scoring: expected 0 (softmax) or 1 (sigmoid), found 7");
  RequireInvalidC(kiln_moe_route(&t.ids, &t.weights, &t.logits, &t.bias, KILN_MOE_SCORING_SIGMOID, 1, 8, 4, 0.0,
                                 nullptr),
                  "routed_scaling_factor: expected a finite value > 0, found 0");
  RequireInvalidC(kiln_moe_route(&t.ids, &t.weights, &t.logits, &t.bias, KILN_MOE_SCORING_SIGMOID, 1, 5, 4, 2.5,
                                 nullptr),
                  "n_group: must divide the 256 experts, found 5");
  DLCall fp64;
  fp64.logits.dtype = {kDLFloat, 64, 1};
  RequireInvalidC(kiln_moe_route(&fp64.ids, &fp64.weights, &fp64.logits, nullptr, KILN_MOE_SCORING_SOFTMAX, 1, 1, 1,
                                 1.0, nullptr),
                  "dtype code 2 (kDLFloat) with 64 bits is not supported");
  DLCall wide;
  wide.out_shape[1] = 17;
  RequireInvalidC(kiln_moe_route(&wide.ids, &wide.weights, &wide.logits, nullptr, KILN_MOE_SCORING_SOFTMAX, 1, 1, 1,
                                 1.0, nullptr),
                  "topk_ids: top_k (dim 1) must be 1 to 16, found 17");
  DLCall host;
  host.bias.device = {kDLCPU, 0};
  RequireInvalidC(kiln_moe_route(&host.ids, &host.weights, &host.logits, &host.bias, KILN_MOE_SCORING_SIGMOID, 1, 8, 4,
                                 2.5, nullptr),
                  "correction_bias: expected a CUDA device tensor, found one on cpu");
}

TEST_CASE("an empty moe_route DLTensor is OK without a launch", "[client][capi][moe]") {
  DLCall empty;
  empty.logits_shape[0] = 0;
  empty.out_shape[0] = 0;
  empty.logits.data = nullptr;
  empty.ids.data = nullptr;
  empty.weights.data = nullptr;
  CHECK(kiln_moe_route(&empty.ids, &empty.weights, &empty.logits, nullptr, KILN_MOE_SCORING_SOFTMAX, 1, 1, 1, 1.0,
                       nullptr) == KILN_OK);
  CHECK(std::string(kiln_last_error()).empty());
}

}  // namespace
