// The kernel parameters of the decode family (batch_decode, its merge step, append_paged_kv),
// each passed by value as one struct. The client repeats these layouts in
// client/ops/decode_abi.h, pinned there and here by static_asserts on size and offsets: a
// change on either side must change both.
//
// The paged KV cache: K and V each [num_pages, page_size, num_kv_heads, head_dim] (pages may
// be `*_page_stride` elements apart; inside a page the layout is dense). Request b owns the
// pages kv_indices[kv_indptr[b] .. kv_indptr[b+1]), in order; its last page holds
// kv_last_page_len[b] tokens, so its KV length is (pages - 1) * page_size + last_page_len.
#pragma once

namespace kiln {
namespace decode {

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
static_assert(sizeof(KilnDecodeSchedule) == 1044, "KilnDecodeSchedule is 1044 bytes (client/ops/decode_abi.h)");

struct KilnBatchDecodeParams {
  void* out;                     // [batch, num_qo_heads, head_dim] of T
  float* lse;                    // [batch, num_qo_heads], natural log; null: not written
  const void* q;                 // [batch, num_qo_heads, head_dim] of T
  const void* k_cache;
  const void* v_cache;
  const int* kv_indptr;          // [batch + 1]
  const int* kv_indices;         // [kv_indptr[batch]]
  const int* kv_last_page_len;   // [batch]
  float* partial_out;            // [num_items, num_qo_heads, head_dim] (split only)
  float* partial_lse;            // [num_items, num_qo_heads], log2 (split only)
  long long q_stride_batch, q_stride_head;      // elements; both even
  long long out_stride_batch, out_stride_head;  // elements; both even
  long long lse_stride_batch;
  long long k_page_stride, v_page_stride;       // elements; multiples of 8
  int num_pages;                 // pages of the cache; other page ids read as empty slots
  int num_kv_heads;
  int num_qo_heads;              // num_kv_heads * group
  float logit_scale;             // soft cap off: sm_scale * log2(e); on: sm_scale / cap
  float cap_scale;               // soft cap on: cap * log2(e); off: unused
  int window_left;               // < 0: no window; else attend the last window_left + 1 positions
  int num_indices;               // entries of kv_indices; larger offsets read as empty slots
  KilnDecodeSchedule schedule;
};
static_assert(sizeof(KilnBatchDecodeParams) == 1208, "KilnBatchDecodeParams is 1208 bytes (client/ops/decode_abi.h)");

struct KilnAppendPagedKvParams {
  void* k_cache;
  void* v_cache;
  const void* k;                 // [nnz, num_kv_heads, head_dim] of T
  const void* v;
  const int* batch_indices;      // [nnz]
  const int* positions;          // [nnz]
  const int* kv_indptr;          // [batch + 1]
  const int* kv_indices;
  const int* kv_last_page_len;   // [batch]
  long long k_stride_token, k_stride_head;  // elements; multiples of vec
  long long v_stride_token, v_stride_head;
  long long k_page_stride, v_page_stride;   // elements; multiples of vec
  long long nnz;
  long long num_indices;         // entries of kv_indices; larger offsets read as uncovered
  int num_kv_heads;
  int page_size;
  int num_pages;
  int batch;
};
static_assert(sizeof(KilnAppendPagedKvParams) == 152, "KilnAppendPagedKvParams is 152 bytes (client/ops/decode_abi.h)");

}  // namespace decode
}  // namespace kiln
