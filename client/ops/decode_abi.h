// The host's copy of the decode family's kernel parameter structs
// (kernels/include/kiln/decode/decode_abi.cuh). The client cannot include the device headers
// (NVRTC reads them at run time), so the layouts are repeated here and pinned on both sides by
// static_asserts on sizes and offsets; a change on either side must change both.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::client {

inline constexpr int kMaxSplitBatch = 512;  // kiln::decode::kMaxSplitBatch

struct DecodeScheduleAbi {
  int32_t num_items;
  int32_t split;
  int32_t chunk_tokens;
  int32_t batch;
  uint16_t item_begin[kMaxSplitBatch + 1];
};
static_assert(sizeof(DecodeScheduleAbi) == 1044, "KilnDecodeSchedule is 1044 bytes on the device");

struct BatchDecodeParamsAbi {
  void* out;
  float* lse;
  const void* q;
  const void* k_cache;
  const void* v_cache;
  const int32_t* kv_indptr;
  const int32_t* kv_indices;
  const int32_t* kv_last_page_len;
  float* partial_out;
  float* partial_lse;
  long long q_stride_batch, q_stride_head;
  long long out_stride_batch, out_stride_head;
  long long lse_stride_batch;
  long long k_page_stride, v_page_stride;
  int32_t num_pages;
  int32_t num_kv_heads;
  int32_t num_qo_heads;
  float logit_scale;
  float cap_scale;
  int32_t window_left;
  int32_t num_indices;
  DecodeScheduleAbi schedule;
};
static_assert(sizeof(BatchDecodeParamsAbi) == 1208, "KilnBatchDecodeParams is 1208 bytes on the device");
static_assert(offsetof(BatchDecodeParamsAbi, q_stride_batch) == 80, "pointers first: 10 x 8 bytes");
static_assert(offsetof(BatchDecodeParamsAbi, num_pages) == 136, "then 7 strides");
static_assert(offsetof(BatchDecodeParamsAbi, schedule) == 164, "the schedule after the scalars");

struct AppendPagedKvParamsAbi {
  void* k_cache;
  void* v_cache;
  const void* k;
  const void* v;
  const int32_t* batch_indices;
  const int32_t* positions;
  const int32_t* kv_indptr;
  const int32_t* kv_indices;
  const int32_t* kv_last_page_len;
  long long k_stride_token, k_stride_head;
  long long v_stride_token, v_stride_head;
  long long k_page_stride, v_page_stride;
  long long nnz;
  long long num_indices;
  int32_t num_kv_heads;
  int32_t page_size;
  int32_t num_pages;
  int32_t batch;
};
static_assert(sizeof(AppendPagedKvParamsAbi) == 152, "KilnAppendPagedKvParams is 152 bytes on the device");
static_assert(offsetof(AppendPagedKvParamsAbi, num_kv_heads) == 136, "pointers, then strides, then ints");

}  // namespace kiln::client
