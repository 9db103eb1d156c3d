// The sampling ops (kiln/ops/sampling.h) and their C ABI refuse every bad argument before
// touching the driver, with a message naming the argument, what was expected and what was
// found; accepted layouts plan the vector width the kernel gets. No GPU: the pointers are
// fake and never dereferenced (validation fails, or only the pure planning step runs, or the
// batch is empty).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "client/ops/sampling/sampling_plan.h"
#include "kiln/ops/sampling.h"
#include "tests/support/fake_device.h"

namespace {

using kiln::Device;
using kiln::DType;
using kiln::StatusCode;
using kiln::TensorView;
using kiln::client::PlanSampling;
using kiln::client::SamplingArgs;
using kiln::client::SamplingOp;
using kiln::ops::PerRequestFloat;
using kiln::ops::PerRequestInt;
using kiln::ops::SamplingSeed;

constexpr uintptr_t kProbs = 0x7f0000000000;  // 256-byte aligned fake device addresses
constexpr uintptr_t kSamples = kProbs + (uintptr_t{1} << 32);
constexpr uintptr_t kParams = kProbs + (uintptr_t{2} << 32);

void* At(uintptr_t address) { return reinterpret_cast<void*>(address); }

TensorView Probs(int64_t rows, int64_t vocab, DType dtype = DType::kFloat32, uintptr_t address = kProbs) {
  return TensorView::Contiguous(At(address), dtype, {rows, vocab});
}
TensorView Samples(int64_t rows, DType dtype = DType::kInt32, uintptr_t address = kSamples) {
  return TensorView::Contiguous(At(address), dtype, {rows});
}

using kiln::testing::RequireInvalid;

kiln::Status TopK(const TensorView& samples, const TensorView& probs, int64_t k = 50) {
  return kiln::ops::top_k_sampling(samples, probs, PerRequestInt{nullptr, k}, SamplingSeed{1, 2});
}

TEST_CASE("sampling refuses probs that are not 2-D fp32", "[client][ops][validation][sampling]") {
  RequireInvalid(TopK(Samples(7), Probs(7, 32000, DType::kBFloat16)),
                 "kiln::ops::top_k_sampling: probs: expected dtype fp32, found bf16");
  RequireInvalid(kiln::ops::argmax(Samples(7), Probs(7, 32000, DType::kFloat16)),
                 "kiln::ops::argmax: probs: expected dtype fp32, found fp16");
  auto three = TensorView::Contiguous(At(kProbs), DType::kFloat32, {7, 2, 16000});
  RequireInvalid(TopK(Samples(7), three), "probs: expected a 2-D tensor [B, V], found rank 3 [7, 2, 16000]");
  auto one = TensorView::Contiguous(At(kProbs), DType::kFloat32, {32000});
  RequireInvalid(kiln::ops::top_p_sampling(Samples(1), one, PerRequestFloat{nullptr, 0.9}, {}),
                 "kiln::ops::top_p_sampling: probs: expected a 2-D tensor [B, V], found rank 1 [32000]");
  RequireInvalid(TopK(Samples(7), Probs(7, 0)),
                 "probs: the vocabulary size (dim 1) must be 1 to 1048575, found 0 in shape [7, 0]");
  RequireInvalid(TopK(Samples(7), Probs(7, 1048576)), "must be 1 to 1048575, found 1048576");
  auto strided = TensorView::Strided(At(kProbs), DType::kFloat32, {7, 32000}, {64000, 2});
  RequireInvalid(TopK(Samples(7), strided), "probs: the last dim must be contiguous (stride 1)");
  auto cpu = TensorView::Contiguous(At(kProbs), DType::kFloat32, {7, 32000}, Device::CPU());
  RequireInvalid(TopK(Samples(7), cpu), "probs: expected a CUDA device tensor, found one on cpu");
  RequireInvalid(TopK(Samples(7), Probs(7, 32000, DType::kFloat32, kProbs + 2)),
                 "probs: data pointer 0x7f0000000002 is not aligned to 4 bytes");
  RequireInvalid(TopK(Samples(7), Probs(7, 32000, DType::kFloat32, 0)),
                 "probs: data is NULL, but the tensor [7, 32000] is not empty");
}

TEST_CASE("sampling refuses samples of the wrong dtype, shape, layout or place",
          "[client][ops][validation][sampling]") {
  RequireInvalid(TopK(Samples(7, DType::kFloat32), Probs(7, 32000)),
                 "kiln::ops::top_k_sampling: samples: expected dtype int32 or int64, found fp32");
  RequireInvalid(TopK(Samples(7, DType::kUInt8), Probs(7, 32000)),
                 "samples: expected dtype int32 or int64, found uint8");
  RequireInvalid(TopK(Samples(8), Probs(7, 32000)), "samples: expected shape [7] (probs' rows), found [8]");
  auto two = TensorView::Contiguous(At(kSamples), DType::kInt32, {7, 1});
  RequireInvalid(TopK(two, Probs(7, 32000)), "samples: expected a 1-D tensor [B] = [7], found rank 2 [7, 1]");
  auto strided = TensorView::Strided(At(kSamples), DType::kInt64, {7}, {2});
  RequireInvalid(TopK(strided, Probs(7, 32000)), "samples: the last dim must be contiguous (stride 1), found stride 2");
  RequireInvalid(TopK(Samples(7, DType::kInt64, kSamples + 4), Probs(7, 32000)),
                 "samples: data pointer 0x7f0100000004 is not aligned to 8 bytes");
  auto elsewhere = TensorView::Contiguous(At(kSamples), DType::kInt32, {7}, Device::CUDA(1));
  RequireInvalid(TopK(elsewhere, Probs(7, 32000)),
                 "samples: on cuda:1, but probs is on cuda:0; all tensors must be on one device");
  RequireInvalid(TopK(Samples(7, DType::kInt32, kProbs + 64), Probs(7, 32000)), "samples and probs overlap in memory");
}

TEST_CASE("sampling refuses out-of-range scalar parameters", "[client][ops][validation][sampling]") {
  RequireInvalid(TopK(Samples(7), Probs(7, 32000), -1), "top_k: expected k >= 0 (0: no top-k), found -1");
  for (double p : {0.0, -0.5, 1.0000001, 2.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    INFO("p = " << p);
    RequireInvalid(kiln::ops::top_p_sampling(Samples(7), Probs(7, 32000), PerRequestFloat{nullptr, p}, {}),
                   "kiln::ops::top_p_sampling: top_p: expected a value in (0, 1], found ");
    RequireInvalid(kiln::ops::top_k_top_p_sampling(Samples(7), Probs(7, 32000), PerRequestInt{nullptr, 50},
                                                   PerRequestFloat{nullptr, p}, {}),
                   "kiln::ops::top_k_top_p_sampling: top_p: expected a value in (0, 1]");
  }
  RequireInvalid(kiln::ops::top_p_sampling(Samples(7), Probs(7, 32000), PerRequestFloat{nullptr, 0.0}, {}),
                 "top_p: expected a value in (0, 1], found 0");
  RequireInvalid(kiln::ops::top_k_top_p_sampling(Samples(7), Probs(7, 32000), PerRequestInt{nullptr, -3},
                                                 PerRequestFloat{nullptr, 0.9}, {}),
                 "top_k: expected k >= 0 (0: no top-k), found -3");
  for (double min_p : {-0.1, 1.01, std::nan("")}) {
    INFO("min_p = " << min_p);
    RequireInvalid(kiln::ops::min_p_sampling(Samples(7), Probs(7, 32000), PerRequestFloat{nullptr, min_p}, {}),
                   "kiln::ops::min_p_sampling: min_p: expected a value in [0, 1], found ");
  }
  RequireInvalid(kiln::ops::min_p_sampling(Samples(7), Probs(7, 32000), PerRequestFloat{nullptr, 1.5}, {}),
                 "min_p: expected a value in [0, 1], found 1.5");
}

TEST_CASE("sampling refuses per-request tensors of the wrong dtype, shape or place",
          "[client][ops][validation][sampling]") {
  auto k64 = TensorView::Contiguous(At(kParams), DType::kInt64, {7});
  RequireInvalid(kiln::ops::top_k_sampling(Samples(7), Probs(7, 32000), PerRequestInt{&k64, 0}, {}),
                 "top_k: expected dtype int32, found int64");
  auto k8 = TensorView::Contiguous(At(kParams), DType::kInt32, {8});
  RequireInvalid(kiln::ops::top_k_sampling(Samples(7), Probs(7, 32000), PerRequestInt{&k8, 0}, {}),
                 "top_k: expected shape [7] (probs' rows), found [8]");
  auto k2d = TensorView::Contiguous(At(kParams), DType::kInt32, {7, 1});
  RequireInvalid(kiln::ops::top_k_sampling(Samples(7), Probs(7, 32000), PerRequestInt{&k2d, 0}, {}),
                 "top_k: expected a 1-D tensor [B] = [7], found rank 2 [7, 1]");
  auto p16 = TensorView::Contiguous(At(kParams), DType::kFloat16, {7});
  RequireInvalid(kiln::ops::top_p_sampling(Samples(7), Probs(7, 32000), PerRequestFloat{&p16, 0}, {}),
                 "top_p: expected dtype fp32, found fp16");
  auto p_cpu = TensorView::Contiguous(At(kParams), DType::kFloat32, {7}, Device::CPU());
  RequireInvalid(kiln::ops::min_p_sampling(Samples(7), Probs(7, 32000), PerRequestFloat{&p_cpu, 0}, {}),
                 "min_p: expected a CUDA device tensor, found one on cpu");
  auto p_dev1 = TensorView::Contiguous(At(kParams), DType::kFloat32, {7}, Device::CUDA(1));
  RequireInvalid(kiln::ops::top_k_top_p_sampling(Samples(7), Probs(7, 32000), PerRequestInt{nullptr, 5},
                                                 PerRequestFloat{&p_dev1, 0}, {}),
                 "top_p: on cuda:1, but probs is on cuda:0; all tensors must be on one device");
  auto k_strided = TensorView::Strided(At(kParams), DType::kInt32, {7}, {2});
  RequireInvalid(kiln::ops::top_k_sampling(Samples(7), Probs(7, 32000), PerRequestInt{&k_strided, 0}, {}),
                 "top_k: the last dim must be contiguous (stride 1)");
  auto k_on_samples = TensorView::Contiguous(At(kSamples), DType::kInt32, {7});
  RequireInvalid(kiln::ops::top_k_sampling(Samples(7), Probs(7, 32000), PerRequestInt{&k_on_samples, 0}, {}),
                 "samples and top_k overlap in memory");
}

TEST_CASE("accepted sampling calls plan the widest load the layout allows", "[client][ops][validation][sampling]") {
  auto plan_of = [](const TensorView& probs, SamplingOp op = SamplingOp::kTopK) {
    TensorView samples = Samples(probs.shape[0], DType::kInt64);
    SamplingArgs args;
    args.samples = &samples;
    args.probs = &probs;
    args.k_scalar = 50;
    args.p_scalar = 0.9;
    args.seed = 7;
    args.offset = 11;
    auto plan = PlanSampling(op, args, "test");
    INFO(plan.status().ToString());
    REQUIRE(plan.ok());
    return *plan;
  };
  const auto llama = plan_of(Probs(128, 128256));
  CHECK(llama.vec == 4);
  CHECK(llama.rows == 128);
  CHECK(llama.vocab == 128256);
  CHECK(llama.row_stride == 128256);
  CHECK(llama.out_dtype == DType::kInt64);
  CHECK(llama.k_values == nullptr);
  CHECK(llama.k_scalar == 50);
  CHECK(llama.seed == 7);
  CHECK(llama.offset == 11);
  CHECK(plan_of(Probs(3, 32001)).vec == 1);  // odd vocabulary: scalar loads
  CHECK(plan_of(Probs(3, 32002)).vec == 2);
  CHECK(plan_of(Probs(1, 32001)).vec == 1);
  CHECK(plan_of(Probs(3, 128256, DType::kFloat32, kProbs + 4)).vec == 1);  // pointer one float off
  CHECK(plan_of(Probs(3, 128256, DType::kFloat32, kProbs + 8)).vec == 2);
  const auto padded = plan_of(TensorView::Strided(At(kProbs), DType::kFloat32, {5, 32000}, {32768, 1}));
  CHECK(padded.vec == 4);
  CHECK(padded.row_stride == 32768);
  CHECK(plan_of(TensorView::Strided(At(kProbs), DType::kFloat32, {5, 32000}, {32002, 1})).vec == 2);
  CHECK(plan_of(Probs(4, 50), SamplingOp::kArgmax).vec == 2);
  CHECK(plan_of(Probs(4, 1), SamplingOp::kMinP).vec == 1);
}

TEST_CASE("limits, disabled truncation and per-request tensors are accepted", "[client][ops][validation][sampling]") {
  TensorView probs = Probs(7, 32000);
  TensorView samples = Samples(7);
  auto k = TensorView::Contiguous(At(kParams), DType::kInt32, {7});
  auto p = TensorView::Contiguous(At(kParams + 4096), DType::kFloat32, {7});
  auto plan = [&](SamplingOp op, const TensorView* kv, int64_t ks, const TensorView* pv, double ps) {
    SamplingArgs args{&samples, &probs, kv, ks, pv, ps, 0, 0};
    return PlanSampling(op, args, "test");
  };
  CHECK(plan(SamplingOp::kTopK, nullptr, 0, nullptr, 0).ok());        // k = 0: no top-k
  CHECK(plan(SamplingOp::kTopK, nullptr, 1000000, nullptr, 0).ok());  // k >= V: no top-k
  CHECK(plan(SamplingOp::kTopP, nullptr, 0, nullptr, 1.0).ok());      // p = 1: no top-p
  CHECK(plan(SamplingOp::kTopP, nullptr, 0, nullptr, 1e-9).ok());
  CHECK(plan(SamplingOp::kMinP, nullptr, 0, nullptr, 0.0).ok());
  CHECK(plan(SamplingOp::kMinP, nullptr, 0, nullptr, 1.0).ok());
  // With a tensor the scalar is not used, so it is not checked.
  auto with_tensors = plan(SamplingOp::kTopKTopP, &k, -5, &p, 7.0);
  INFO(with_tensors.status().ToString());
  REQUIRE(with_tensors.ok());
  CHECK(with_tensors->k_values == reinterpret_cast<const int32_t*>(kParams));
  CHECK(with_tensors->p_values == reinterpret_cast<const float*>(kParams + 4096));
  // argmax takes no parameters: none is checked.
  CHECK(plan(SamplingOp::kArgmax, nullptr, -5, nullptr, 7.0).ok());
}

TEST_CASE("an empty batch is OK without a GPU", "[client][ops][validation][sampling]") {
  auto status = TopK(Samples(0), TensorView::Contiguous(nullptr, DType::kFloat32, {0, 32000}));
  INFO(status.ToString());
  CHECK(status.ok());
  CHECK(kiln::ops::argmax(Samples(0, DType::kInt64), TensorView::Contiguous(nullptr, DType::kFloat32, {0, 7})).ok());
}

TEST_CASE("the sampling C ABI refuses bad arguments with the C name", "[client][capi][sampling]") {
  int64_t probs_shape[2] = {7, 32000};
  int64_t samples_shape[1] = {7};
  DLTensor probs{};
  probs.data = At(kProbs);
  probs.device = {kDLCUDA, 0};
  probs.ndim = 2;
  probs.dtype = {kDLFloat, 32, 1};
  probs.shape = probs_shape;
  DLTensor samples = probs;
  samples.data = At(kSamples);
  samples.ndim = 1;
  samples.dtype = {kDLInt, 32, 1};
  samples.shape = samples_shape;
  auto require = [](kiln_status status, const std::string& fragment) {
    const std::string error = kiln_last_error();
    INFO(error);
    REQUIRE(status == KILN_ERROR_INVALID_ARGUMENT);
    CHECK(error.find(fragment) != std::string::npos);
  };
  require(kiln_argmax(nullptr, &probs, nullptr), "kiln_argmax: samples: the DLTensor pointer is NULL");
  require(kiln_top_k_sampling(&samples, nullptr, nullptr, 5, 0, 0, nullptr),
          "kiln_top_k_sampling: probs: the DLTensor pointer is NULL");
  require(kiln_top_k_sampling(&samples, &probs, nullptr, -1, 0, 0, nullptr),
          "kiln_top_k_sampling: top_k: expected k >= 0 (0: no top-k), found -1");
  require(kiln_top_p_sampling(&samples, &probs, nullptr, 1.5, 0, 0, nullptr),
          "kiln_top_p_sampling: top_p: expected a value in (0, 1], found 1.5");
  require(kiln_min_p_sampling(&samples, &probs, nullptr, -1, 0, 0, nullptr),
          "kiln_min_p_sampling: min_p: expected a value in [0, 1], found -1");
  DLTensor k = samples;
  k.data = At(kParams);
  k.dtype = {kDLInt, 64, 1};
  require(kiln_top_k_top_p_sampling(&samples, &probs, &k, 0, nullptr, 0.9, 0, 0, nullptr),
          "kiln_top_k_top_p_sampling: top_k: expected dtype int32, found int64");
  probs.dtype = {kDLBfloat, 16, 1};
  require(kiln_argmax(&samples, &probs, nullptr), "kiln_argmax: probs: expected dtype fp32, found bf16");
  // An empty batch succeeds and clears the message.
  probs.dtype = {kDLFloat, 32, 1};
  probs_shape[0] = 0;
  samples_shape[0] = 0;
  CHECK(kiln_argmax(&samples, &probs, nullptr) == KILN_OK);
  CHECK(std::string(kiln_last_error()).empty());
}

}  // namespace

TEST_CASE("a small batch on sm_90+ shares each row among a cluster of blocks", "[client][ops][sampling]") {
  using kiln::client::ChooseSamplingCluster;
  // H200: 132 SMs. 4 blocks per row while rows * 4 fills at most half the SMs (clusters of 4
  // do not all run at once beyond that), then 2 while rows * 2 <= SMs, then 1.
  CHECK(ChooseSamplingCluster(1, 9, 132, 0) == 4);
  CHECK(ChooseSamplingCluster(16, 9, 132, 0) == 4);
  CHECK(ChooseSamplingCluster(17, 9, 132, 0) == 2);
  CHECK(ChooseSamplingCluster(64, 9, 132, 0) == 2);
  CHECK(ChooseSamplingCluster(66, 9, 132, 0) == 2);
  CHECK(ChooseSamplingCluster(67, 9, 132, 0) == 1);
  CHECK(ChooseSamplingCluster(128, 9, 132, 0) == 1);
  CHECK(ChooseSamplingCluster(1, 10, 148, 0) == 4);  // later archs too
  CHECK(ChooseSamplingCluster(8, 9, 40, 0) == 2);    // a smaller GPU: fewer rows per cluster size
  // Below sm_90 there are no clusters, whatever is asked.
  CHECK(ChooseSamplingCluster(1, 8, 108, 0) == 1);
  CHECK(ChooseSamplingCluster(1, 8, 108, 8) == 1);
  // KILN_SAMPLING_CLUSTER forces a size on sm_90+, unless the grid would pass 2^31 - 1 blocks.
  CHECK(ChooseSamplingCluster(128, 9, 132, 8) == 8);
  CHECK(ChooseSamplingCluster(1, 9, 132, 1) == 1);
  CHECK(ChooseSamplingCluster(int64_t{1} << 29, 9, 132, 8) == 1);
}
