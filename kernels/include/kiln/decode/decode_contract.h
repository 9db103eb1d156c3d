// The op contract of the decode family (kiln/common/op_contract.h says what a contract is):
//
//   append_paged_kv  writes new tokens' k and v into their slots of a paged KV cache
//   batch_decode     decode attention over the paged cache: one query token per request, GQA,
//                    split-KV chunks merged by log-sum-exp (entries kiln_batch_decode and
//                    kiln_batch_decode_merge)
//
// Params: append_paged_kv: dtype (fp16, bf16), head_dim (64, 128, 256), vec (1, 2, 4, 8);
// batch_decode: dtype, head_dim, group (query heads per kv head: 1, 2, 4, 8), page_size (a power
// of two up to kMaxPageSize), soft_cap (0 or 1: the cap itself is a launch argument).
// Launch, each entry with the block and dynamic shared memory its hint names:
//   kiln_batch_decode        grid.x = schedule.num_items * num_kv_heads
//   kiln_batch_decode_merge  (split schedules only, after it on the same stream) grid =
//                            (batch, ceil(num_qo_heads / items_per_block)): query heads per block
//   kiln_append_paged_kv     grid.x = min(ceil(nnz * num_kv_heads * head_dim / vec / block),
//                            max_blocks); the kernel loops over the rest
// Every entry takes one parameter struct below, by value.
//
// The paged KV cache: K and V each [num_pages, page_size, num_kv_heads, head_dim] (pages may
// be `*_page_stride` elements apart; inside a page the layout is dense). Request b owns the
// pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]), in order; its last page holds
// kv_last_page_len[b] tokens, so its KV length is (pages - 1) * page_size + last_page_len.
#pragma once

#include "kiln/common/op_contract.h"

namespace kiln {
namespace decode {

constexpr const char* kAppendPagedKvOp = "append_paged_kv";
constexpr const char* kAppendPagedKvEntry = "kiln_append_paged_kv";
constexpr const char* kBatchDecodeOp = "batch_decode";
constexpr const char* kBatchDecodeEntry = "kiln_batch_decode";
constexpr const char* kBatchDecodeMergeEntry = "kiln_batch_decode_merge";

constexpr const char* kParamHeadDim = "head_dim";    // 64, 128 or 256
constexpr const char* kParamGroup = "group";         // 1, 2, 4 or 8
constexpr const char* kParamPageSize = "page_size";  // a power of two, 1..kMaxPageSize
constexpr const char* kParamSoftCap = "soft_cap";    // 0 or 1
constexpr int kMaxPageSize = 256;
constexpr int kMaxGroup = 8;  // one m16n8k16 MMA covers 8 query heads of a kv head

// Requests a split schedule can describe (item_begin has one entry more). A larger batch is
// never split: it has enough (request, kv head) pairs to fill any GPU on its own.
constexpr int kMaxSplitBatch = 512;

// How batch_decode's work items map to requests (one block per item and kv head).
//  split == 0: item b is request b, all of its (windowed) KV; the kernel writes `out`.
//  split == 1: request b owns items item_begin[b] .. item_begin[b+1] (at least one); item
//              item_begin[b] + j covers absolute KV positions [(c0 + j) * chunk_tokens,
//              (c0 + j + 1) * chunk_tokens) of it, where c0 = window_begin / chunk_tokens.
//              A request with one item is written directly; the others go through the
//              workspace (partial_out, partial_lse) and the merge kernel.
struct KilnDecodeSchedule {
  int num_items;
  int split;
  int chunk_tokens;
  int batch;
  unsigned short item_begin[kMaxSplitBatch + 1];
};
static_assert(sizeof(KilnDecodeSchedule) == 1044, "KilnDecodeSchedule is 1044 bytes");

struct KilnBatchDecodeParams {
  void* out;      // [batch, num_qo_heads, head_dim] of T
  float* lse;     // [batch, num_qo_heads], natural log; null: not written
  const void* q;  // [batch, num_qo_heads, head_dim] of T
  const void* k_cache;
  const void* v_cache;
  const int* kv_indptr;                         // [batch + 1]
  const int* kv_indices;                        // [kv_indptr[batch]]
  const int* kv_last_page_len;                  // [batch]
  float* partial_out;                           // [num_items, num_qo_heads, head_dim] (split only)
  float* partial_lse;                           // [num_items, num_qo_heads], log2 (split only)
  long long q_stride_batch, q_stride_head;      // elements; both even
  long long out_stride_batch, out_stride_head;  // elements; both even
  long long lse_stride_batch;
  long long k_page_stride, v_page_stride;  // elements; multiples of 8
  int num_pages;                           // pages of the cache; other page ids read as empty slots
  int num_kv_heads;
  int num_qo_heads;   // num_kv_heads * group
  float logit_scale;  // soft cap off: sm_scale * log2(e); on: sm_scale / cap
  float cap_scale;    // soft cap on: cap * log2(e); off: unused
  int window_left;    // < 0: no window; else attend the last window_left + 1 positions
  int num_indices;    // entries of kv_indices; larger offsets read as empty slots
  KilnDecodeSchedule schedule;
};
static_assert(sizeof(KilnBatchDecodeParams) == 1208, "KilnBatchDecodeParams is 1208 bytes");

struct KilnAppendPagedKvParams {
  void* k_cache;
  void* v_cache;
  const void* k;  // [nnz, num_kv_heads, head_dim] of T
  const void* v;
  const int* batch_indices;  // [nnz]
  const int* positions;      // [nnz]
  const int* kv_indptr;      // [batch + 1]
  const int* kv_indices;
  const int* kv_last_page_len;              // [batch]
  long long k_stride_token, k_stride_head;  // elements; multiples of vec
  long long v_stride_token, v_stride_head;
  long long k_page_stride, v_page_stride;  // elements; multiples of vec
  long long nnz;
  long long num_indices;  // entries of kv_indices; larger offsets read as uncovered
  int num_kv_heads;
  int page_size;
  int num_pages;
  int batch;
};
static_assert(sizeof(KilnAppendPagedKvParams) == 152, "KilnAppendPagedKvParams is 152 bytes");

}  // namespace decode
}  // namespace kiln
