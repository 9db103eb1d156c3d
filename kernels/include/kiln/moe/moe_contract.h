// The op contract of the moe family (kiln/common/op_contract.h says what a contract is).
//
//   moe_route   router logits [T, E] -> per token, the top_k experts (topk_ids [T, top_k] int32)
//               and their weights (topk_weights [T, top_k] fp32), docs/kernels-moe.md
//
// Params: dtype (fp32, fp16, bf16: logits' type), scoring ("softmax" or "sigmoid": the scores
// the experts are ranked by), max_experts (32, 64, 128 or 256: the E range one kernel holds,
// max_experts / 32 values per lane). T, E, top_k, the group limit, the bias, renormalization and
// the scaling factor are launch arguments (MoeRouteParams): one cubin per (dtype, scoring,
// max_experts) serves every model of that size class.
// Launch (the only entry): one warp per token, kWarpsPerBlock tokens per block
// (items_per_block = kWarpsPerBlock: tokens), grid.x = ceil(T / items_per_block), block as
// hinted (kBlock threads), no dynamic shared memory.
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace moe {

constexpr const char* kMoeRouteOp = "moe_route";
constexpr const char* kMoeRouteEntry = "kiln_moe_route";

constexpr const char* kParamScoring = "scoring";         // "softmax" or "sigmoid"
constexpr const char* kParamMaxExperts = "max_experts";  // 32, 64, 128 or 256
constexpr const char* kScoringSoftmax = "softmax";
constexpr const char* kScoringSigmoid = "sigmoid";

// The largest E: eight values per lane of one warp.
constexpr int kMaxExperts = 256;
// The largest top_k: lane k of the token's warp holds the k-th choice; 16 covers every
// published router (DeepSeek-V3, Qwen3: 8) with room.
constexpr int kMaxTopK = 16;
// The largest n_group: lane g of the warp scores group g.
constexpr int kMaxGroups = 32;
// One warp per token, this many tokens per block.
constexpr int kWarpsPerBlock = 4;
constexpr int kBlock = 32 * kWarpsPerBlock;

// The one entry's parameter, by value. Strides count elements between row starts (the last
// dims are contiguous). correction_bias null: no bias. n_group 1: no group limit.
struct MoeRouteParams {
  int* topk_ids;
  float* topk_weights;
  const void* logits;
  const float* correction_bias;
  long long tokens;
  long long logits_stride;
  long long ids_stride;
  long long weights_stride;
  int experts;
  int top_k;
  int n_group;
  int topk_group;
  int renormalize;  // 0 or 1
  double routed_scaling_factor;
};
static_assert(sizeof(MoeRouteParams) == 96, "MoeRouteParams: 4 pointers, 4 strides, 5 ints (padded), 1 double");

}  // namespace moe
}  // namespace kiln
