// The tensor arguments of the attention families (kiln/ops/decode.h, kiln/ops/prefill.h),
// checked and seen as what the kernels take: a paged KV cache and its page table, a tensor of
// heads [rows, heads, head_dim], an int32 vector, a plan's device workspace.
// Pure (no driver call): every check runs, and is tested, without a GPU. Each failure is
// INVALID_ARGUMENT "<argument>: <expected>, found <found>"; callers add the API's name.
#pragma once

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>

#include "client/ops/row_view.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// k_cache / v_cache: [num_pages, page_size, num_kv_heads, head_dim], fp16 or bf16, dense
// inside a page, page stride a multiple of 8 elements and >= the page's size, data 16-byte
// aligned (the kernels copy 16-byte chunks), at least one page.
struct PagedCacheView {
  const char* name = "";
  const TensorView* tensor = nullptr;
  char* data = nullptr;
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t page_stride = 0;  // elements
};
StatusOr<PagedCacheView> ViewPagedCache(const TensorView& t, const char* name);

// v_cache like k_cache: same dtype, shape and device (page strides may differ).
Status CheckCachePair(const PagedCacheView& k, const PagedCacheView& v);

// q, out, k, v: [rows, heads, head_dim] with head_dim contiguous; rows and heads strides free
// (non-negative). A CUDA tensor, a non-NULL pointer aligned to its element when non-empty.
struct HeadsView {
  const char* name = "";
  const TensorView* tensor = nullptr;
  char* data = nullptr;
  int64_t rows = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t row_stride = 0;   // elements
  int64_t head_stride = 0;  // elements
};
StatusOr<HeadsView> ViewHeads(const TensorView& t, const char* name);

// An int32 vector on a CUDA device, contiguous, NULL only when empty.
struct Int32Vector {
  const int32_t* data = nullptr;
  int64_t size = 0;
};
StatusOr<Int32Vector> ViewInt32Vector(const TensorView& t, const char* name);

// v has shape [d0, d1, d2]; else "<name>: expected shape [d0, d1, d2] (<meaning>), found ...".
Status CheckHeadsShape(const HeadsView& v, int64_t d0, int64_t d1, int64_t d2, const char* meaning);

// t's dtype is `want`; else "<name>: expected dtype <want> (<whose>), found ...".
Status CheckDTypeIs(const TensorView& t, const char* name, DType want, const char* whose);

// The page table: kv_indptr [batch + 1], kv_last_page_len [batch], kv_indices [>= min_indices]
// (int32 vectors). batch < 0: the batch is kv_last_page_len's size (at least one request).
struct PageTable {
  Int32Vector indptr, indices, last_page_len;
};
StatusOr<PageTable> ViewPageTable(const TensorView& kv_indptr, const TensorView& kv_indices,
                                  const TensorView& kv_last_page_len, int64_t batch, int64_t min_indices);

// A short list of named tensors kept on the stack, so that a call's checks allocate nothing (the
// attention calls run once per layer and step).
class NamedTensors {
 public:
  using Item = std::pair<const TensorView*, const char*>;
  static constexpr size_t kCapacity = 12;
  NamedTensors(std::initializer_list<Item> items) {
    for (const Item& item : items) Add(item.first, item.second);
  }
  void Add(const TensorView* tensor, const char* name) {
    assert(size_ < kCapacity && "NamedTensors holds at most kCapacity tensors");
    items_[size_++] = {tensor, name};
  }
  std::span<const Item> items() const { return {items_.data(), size_}; }
  const Item* begin() const { return items_.data(); }
  const Item* end() const { return items_.data() + size_; }

 private:
  std::array<Item, kCapacity> items_{};
  size_t size_ = 0;
};

// A plan's device workspace: when `needed` > 0, non-NULL, at least `needed` bytes given, 16-byte
// aligned, and sharing no byte with any of `tensors`.
Status CheckWorkspace(void* workspace, size_t given, size_t needed,
                      std::span<const std::pair<const TensorView*, const char*>> tensors);

// The list form of CheckSameDevice (row_view.h): OK when every tensor is on `device`;
// INVALID_ARGUMENT naming the first that is not.
Status CheckSameDevice(const Device& device, const char* device_owner,
                       std::initializer_list<std::pair<const TensorView*, const char*>> tensors);

}  // namespace kiln::client
