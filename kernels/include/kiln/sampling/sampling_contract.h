// The op contract of the sampling family (kiln/common/op_contract.h says what a contract is):
// one token per row of probs [rows, vocab] fp32, into samples [rows] (int32 or int64):
//
//   top_k_sampling, top_p_sampling, top_k_top_p_sampling, min_p_sampling   a deterministic draw
//   argmax                                                                  the largest value
//
// Params: out_dtype (int32, int64: samples' type), vec (kParamVec: 1, 2 or 4 floats per load
// of probs), cluster (kParamCluster: 1, 2, 4 or 8 blocks per row; above 1 sm_90+ only). vocab
// is not a param: one kernel per (op, out_dtype, vec, cluster) serves every vocabulary.
// Launch (the only entry of each op): grid.x = rows * cluster, with cluster dimension
// (cluster, 1, 1) when cluster > 1 (items_per_block is 1: one row per block or cluster); block
// and dynamic shared memory as hinted (kSelectSmemBytes, kClusterSelectSmemBytes in a cluster,
// for the ops that select a threshold; none for min_p and argmax).
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace sampling {

constexpr const char* kTopKOp = "top_k_sampling";
constexpr const char* kTopKEntry = "kiln_top_k_sampling";
constexpr const char* kTopPOp = "top_p_sampling";
constexpr const char* kTopPEntry = "kiln_top_p_sampling";
constexpr const char* kTopKTopPOp = "top_k_top_p_sampling";
constexpr const char* kTopKTopPEntry = "kiln_top_k_top_p_sampling";
constexpr const char* kMinPOp = "min_p_sampling";
constexpr const char* kMinPEntry = "kiln_min_p_sampling";
constexpr const char* kArgmaxOp = "argmax";
constexpr const char* kArgmaxEntry = "kiln_argmax";

constexpr const char* kParamOutDType = "out_dtype";  // "int32" or "int64"

// The largest vocabulary: the value histograms keep a count and an exact significand sum in
// one 64-bit word (kiln/sampling/value_select.cuh).
constexpr int kMaxVocab = (1 << 20) - 1;
// One block of this many threads per row.
constexpr int kBlock = 1024;
// Dynamic shared memory of top_k, top_p and top_k_top_p: two 2048-bin histograms of 64-bit
// words, a 4096-token list and an 8192-token race queue (kiln::sampling::SelectSmem, which
// asserts this size).
constexpr int kSelectSmemBytes = 2 * 2048 * 8 + 4096 * 8 + 8192 * 4;
// ... with a row over a cluster: one more 2048-bin histogram, the block's part of the row's
// (kiln::sampling::ClusterSelectSmem).
constexpr int kClusterSelectSmemBytes = kSelectSmemBytes + 2048 * 8;

// Param `cluster`: the blocks (a thread-block cluster, sm_90+) that share a row. 1: a block
// per row (any arch of the family); 2, 4, 8: small batches spread over more SMs.
constexpr const char* kParamCluster = "cluster";
constexpr int kMaxCluster = 8;  // the portable cluster size

// Every entry's parameter, by value. Per-row parameters: a [rows] array, or null and the scalar
// for every row (k for top_k / top_k_top_p; p for top_p / top_k_top_p, min_p for min_p).
// Philox key `seed`, counter words 2..3 `offset`.
struct SamplingParams {
  void* samples;
  const float* probs;
  long long vocab;
  long long row_stride;  // floats between row starts
  const int* k_values;
  long long k_scalar;
  const float* p_values;
  double p_scalar;
  unsigned long long seed;
  unsigned long long offset;
};
static_assert(sizeof(SamplingParams) == 80, "SamplingParams: 10 words");

}  // namespace sampling
}  // namespace kiln
