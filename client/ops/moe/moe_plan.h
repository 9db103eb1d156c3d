// MoeRoutePlan, MoePermutePlan and MoeUnpermutePlan: the arguments of moe_route, moe_permute and
// moe_unpermute (kiln/ops/moe.h) validated and turned into what the kernels take
// (kiln::moe::MoeRouteParams, MoePermuteParams, MoePermuteGatherParams, MoeUnpermuteParams) and
// the specialization and grid they need. Pure: no driver call, so every check runs, and is
// tested, without a GPU.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "kiln/moe/moe_contract.h"
#include "kiln/ops/moe.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// The arguments as the API receives them; `scoring` as an integer, since the C ABI may pass
// any value (checked here).
struct MoeRouteArgs {
  const TensorView* topk_ids = nullptr;
  const TensorView* topk_weights = nullptr;
  const TensorView* logits = nullptr;
  const TensorView* correction_bias = nullptr;  // optional
  int scoring = 0;                              // ops::MoeScoring
  bool renormalize = true;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
};

struct MoeRoutePlan {
  DType dtype = DType::kFloat32;  // logits'
  bool sigmoid = false;
  int max_experts = 32;  // the specialization: the smallest of 32, 64, 128, 256 holding E
  int device = 0;
  moe::MoeRouteParams params = {};
};

// The arguments of moe_permute as the API receives them; x and permuted_x both or neither.
struct MoePermuteArgs {
  const TensorView* expert_counts = nullptr;
  const TensorView* m_indptr = nullptr;
  const TensorView* row_to_slot = nullptr;
  const TensorView* slot_to_row = nullptr;
  const TensorView* permuted_x = nullptr;  // optional: the gather's output
  const TensorView* topk_ids = nullptr;
  const TensorView* x = nullptr;  // optional: the gather's input
  int64_t align = 1;
};

struct MoePermutePlan {
  int max_experts = 32;  // the specialization: the smallest of 32, 64, 128, 256 holding E
  int device = 0;
  bool gather = false;  // x given: launch kiln_moe_permute_gather after the permutation
  moe::MoePermuteParams params = {};
  moe::MoePermuteGatherParams gather_params = {};
};

// The widest copy unit (16, 8, 4 or 2 bytes) dividing every one of `values`.
int WidestUnit(std::initializer_list<uint64_t> values);

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
StatusOr<MoePermutePlan> PlanMoePermute(const MoePermuteArgs& args, const char* api);

// The arguments of moe_unpermute as the API receives them.
struct MoeUnpermuteArgs {
  const TensorView* out = nullptr;
  const TensorView* expert_out = nullptr;
  const TensorView* slot_to_row = nullptr;
  const TensorView* topk_weights = nullptr;
};

struct MoeUnpermutePlan {
  DType dtype = DType::kBFloat16;  // the specialization: expert_out's (and out's)
  int device = 0;
  unsigned threads = 0;         // block.x: moe::MoeUnpermuteThreads(units)
  unsigned blocks_per_row = 0;  // grid.y: moe::MoeUnpermuteBlocksPerRow(units); grid.x is the tokens
  moe::MoeUnpermuteParams params = {};
};

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
StatusOr<MoeUnpermutePlan> PlanMoeUnpermute(const MoeUnpermuteArgs& args, const char* api);

// A remembered combine (a plan PlanMoeUnpermute made) over new pointers, as the fused MoE layers'
// plan memos rebuild it: false when the access width PlanMoeUnpermute would choose for them
// (WidestUnit over the rows' bytes, strides and the two row pointers) differs from the remembered
// one, and the whole validation must answer; the same width keeps the threads and blocks.
bool RebindMoeUnpermute(MoeUnpermutePlan* plan, void* out, const void* expert_out, const int* slot_to_row,
                        const float* topk_weights);

// The smallest max_experts specialization that holds `experts` (1..kMaxExperts).
int MaxExpertsFor(int64_t experts);

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
StatusOr<MoeRoutePlan> PlanMoeRoute(const MoeRouteArgs& args, const char* api);

}  // namespace kiln::client
