// SamplingPlan: the arguments of a sampling op (kiln/ops/sampling.h) validated and turned into
// what the kernel takes (pointers, vocabulary, row stride, per-row parameter arrays or
// scalars, seed, offset) and the specialization it needs (op, samples dtype, vec). Pure: no
// driver call, so every check runs, and is tested, without a GPU.
#pragma once

#include <cstdint>

#include "kiln/sampling/sampling_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

enum class SamplingOp : uint8_t { kTopK, kTopP, kTopKTopP, kMinP, kArgmax };

// The arguments as the API receives them. k_values / p_values may be null (then the scalar
// serves every row); p is top_p for kTopP / kTopKTopP and min_p for kMinP.
struct SamplingArgs {
  const TensorView* samples = nullptr;
  const TensorView* probs = nullptr;
  const TensorView* k_values = nullptr;
  int64_t k_scalar = 0;
  const TensorView* p_values = nullptr;
  double p_scalar = 0;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

struct SamplingPlan {
  SamplingOp op = SamplingOp::kArgmax;
  const char* api = "";  // the caller's name for messages: "kiln::ops::top_k_sampling", ...
  DType out_dtype = DType::kInt32;
  int device = 0;
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t row_stride = 0;  // floats between row starts of probs
  int vec = 1;
  void* samples = nullptr;
  const float* probs = nullptr;
  const int32_t* k_values = nullptr;  // null: k_scalar
  int64_t k_scalar = 0;
  const float* p_values = nullptr;  // null: p_scalar
  double p_scalar = 0;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// The blocks that share one row (the spec's cluster param), so that a small batch reads each
// row with several SMs (one block per row leaves 131 of an H200's 132 SMs idle at batch 1): on
// sm_90+, 4 while rows * 4 <= half the SMs, else 2 while rows * 2 <= the SMs, else 1; below
// sm_90, 1. `forced` (1, 2, 4 or 8: KILN_SAMPLING_CLUSTER) replaces the choice on sm_90+; 0:
// choose.
int ChooseSamplingCluster(int64_t rows, int cc_major, int multiprocessors, int forced);

// KILN_SAMPLING_CLUSTER, read once: 0 when unset or "auto", else 1, 2, 4 or 8. Any other value
// is said once on stderr and reads as "auto". Tests may replace it (SetSamplingClusterForTesting).
int SamplingClusterFromEnvironment();
// 0 (choose), 1, 2, 4 or 8 in place of the environment's value; -1: the environment's again.
void SetSamplingClusterForTesting(int forced);

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
// `api` must outlive the plan (a string literal).
StatusOr<SamplingPlan> PlanSampling(SamplingOp op, const SamplingArgs& args, const char* api);

}  // namespace kiln::client
