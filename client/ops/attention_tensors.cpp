#include "client/ops/attention_tensors.h"

#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/row_view.h"

namespace kiln::client {
namespace {

// Rank, device, non-negative sizes and strides, and a usable pointer.
Status CheckBasics(const TensorView& t, const char* name, int rank, const char* layout) {
  if (t.ndim != rank)
    return InvalidArgument(name, "expected a " + std::to_string(rank) + "-D tensor " + layout + ", found rank " +
                                     std::to_string(t.ndim) +
                                     (t.ndim >= 1 && t.ndim <= kMaxTensorDims ? " " + ShapeText(t) : ""));
  KILN_RETURN_IF_ERROR(CheckCudaTensor(t, name));
  const uintptr_t p = reinterpret_cast<uintptr_t>(t.data);
  if (t.numel() > 0 && t.data == nullptr)
    return InvalidArgument(name, "data is NULL, but the tensor " + ShapeText(t) + " is not empty");
  const size_t element = DTypeSize(t.dtype);
  if (t.numel() > 0 && element > 1 && p % element != 0)
    return InvalidArgument(name, "data pointer " + PointerText(p) + " is not aligned to " + std::to_string(element) +
                                     " bytes (the size of one " + DTypeName(t.dtype) + " element)");
  return OkStatus();
}

}  // namespace

StatusOr<PagedCacheView> ViewPagedCache(const TensorView& t, const char* name) {
  KILN_RETURN_IF_ERROR(CheckBasics(t, name, 4, "[num_pages, page_size, num_kv_heads, head_dim]"));
  if (t.dtype != DType::kFloat16 && t.dtype != DType::kBFloat16)
    return InvalidArgument(name,
                           std::string("dtype ") + DTypeName(t.dtype) + " is not supported; expected fp16 or bf16");
  PagedCacheView v;
  v.name = name;
  v.tensor = &t;
  v.data = static_cast<char*>(t.data);
  v.num_pages = t.shape[0];
  v.page_size = t.shape[1];
  v.num_kv_heads = t.shape[2];
  v.head_dim = t.shape[3];
  v.page_stride = t.strides[0];
  if (v.num_pages < 1) return InvalidArgument(name, "expected at least one page, found shape " + ShapeText(t));
  // Inside a page the layout is dense: [page_size, num_kv_heads, head_dim] row-major. A dim of
  // size 1 may have any stride.
  const int64_t dense[3] = {v.num_kv_heads * v.head_dim, v.head_dim, 1};
  for (int d = 1; d < 4; ++d) {
    if (t.shape[d] > 1 && t.strides[d] != dense[d - 1])
      return InvalidArgument(name, "a page must be dense [page_size, num_kv_heads, head_dim]: expected strides [*, " +
                                       std::to_string(dense[0]) + ", " + std::to_string(dense[1]) + ", 1], found " +
                                       StridesText(t));
  }
  const int64_t page_elements = v.page_size * v.num_kv_heads * v.head_dim;
  if (v.num_pages > 1 && v.page_stride < page_elements)
    return InvalidArgument(name, "pages overlap: page stride " + std::to_string(v.page_stride) + " < " +
                                     std::to_string(page_elements) + " elements per page");
  if (v.num_pages == 1) v.page_stride = page_elements;
  if (v.page_stride % 8 != 0)
    return InvalidArgument(name, "the page stride must be a multiple of 8 elements (16 bytes), found " +
                                     std::to_string(v.page_stride));
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return InvalidArgument(name, "data pointer " + PointerText(t.data) +
                                     " is not 16-byte aligned (the kernels copy 16-byte chunks of the cache)");
  if (v.num_pages > INT32_MAX) return InvalidArgument(name, "more than 2^31-1 pages: " + std::to_string(v.num_pages));
  return v;
}

Status CheckCachePair(const PagedCacheView& k, const PagedCacheView& v) {
  if (v.tensor->dtype != k.tensor->dtype)
    return InvalidArgument(v.name, std::string("expected dtype ") + DTypeName(k.tensor->dtype) + " (" + k.name +
                                       "'s), found " + DTypeName(v.tensor->dtype));
  for (int d = 0; d < 4; ++d) {
    if (v.tensor->shape[d] != k.tensor->shape[d])
      return InvalidArgument(v.name, "expected shape " + ShapeText(*k.tensor) + " (" + k.name + "'s), found " +
                                         ShapeText(*v.tensor));
  }
  KILN_RETURN_IF_ERROR(CheckSameDevice(*v.tensor, v.name, k.tensor->device, k.name));
  // K and V pages interleaved in one pool (equal page strides, V's pages in the gaps between
  // K's) share no element although their extents overlap.
  if (k.page_stride == v.page_stride) {
    const int64_t element = static_cast<int64_t>(DTypeSize(k.tensor->dtype));
    const int64_t stride = k.page_stride * element;
    const int64_t page = k.page_size * k.num_kv_heads * k.head_dim * element;
    int64_t offset = (static_cast<int64_t>(reinterpret_cast<uintptr_t>(v.data)) -
                      static_cast<int64_t>(reinterpret_cast<uintptr_t>(k.data))) %
                     stride;
    if (offset < 0) offset += stride;
    if (offset >= page && stride - offset >= page) return OkStatus();
  }
  return CheckDisjoint(*k.tensor, k.name, *v.tensor, v.name);
}

StatusOr<HeadsView> ViewHeads(const TensorView& t, const char* name) {
  KILN_RETURN_IF_ERROR(CheckBasics(t, name, 3, "[rows, heads, head_dim]"));
  if (t.shape[2] > 1 && t.strides[2] != 1)
    return InvalidArgument(name, "the last dim (head_dim) must be contiguous (stride 1), found stride " +
                                     std::to_string(t.strides[2]) + " in " + t.Describe());
  HeadsView v;
  v.name = name;
  v.tensor = &t;
  v.data = static_cast<char*>(t.data);
  v.rows = t.shape[0];
  v.heads = t.shape[1];
  v.head_dim = t.shape[2];
  v.row_stride = t.strides[0];
  v.head_stride = t.strides[1];
  return v;
}

StatusOr<Int32Vector> ViewInt32Vector(const TensorView& t, const char* name) {
  KILN_RETURN_IF_ERROR(CheckBasics(t, name, 1, "[n]"));
  if (t.dtype != DType::kInt32)
    return InvalidArgument(name, std::string("expected dtype int32, found ") + DTypeName(t.dtype));
  if (t.shape[0] > 1 && t.strides[0] != 1)
    return InvalidArgument(name, "must be contiguous (stride 1), found stride " + std::to_string(t.strides[0]));
  return Int32Vector{static_cast<const int32_t*>(t.data), t.shape[0]};
}

Status CheckSameDevice(const Device& device, const char* device_owner,
                       std::initializer_list<std::pair<const TensorView*, const char*>> tensors) {
  for (const auto& [t, name] : tensors) {
    KILN_RETURN_IF_ERROR(CheckSameDevice(*t, name, device, device_owner));
  }
  return OkStatus();
}

Status CheckHeadsShape(const HeadsView& v, int64_t d0, int64_t d1, int64_t d2, const char* meaning) {
  if (v.rows != d0 || v.heads != d1 || v.head_dim != d2)
    return InvalidArgument(std::string(v.name) + ": expected shape " + ListText({d0, d1, d2}) + " (" + meaning +
                           "), found " + ShapeText(*v.tensor));
  return OkStatus();
}

Status CheckDTypeIs(const TensorView& t, const char* name, DType want, const char* whose) {
  if (t.dtype != want)
    return InvalidArgument(std::string(name) + ": expected dtype " + DTypeName(want) + " (" + whose + "), found " +
                           DTypeName(t.dtype));
  return OkStatus();
}

StatusOr<PageTable> ViewPageTable(const TensorView& kv_indptr, const TensorView& kv_indices,
                                  const TensorView& kv_last_page_len, int64_t batch, int64_t min_indices) {
  PageTable table;
  KILN_ASSIGN_OR_RETURN(auto indptr, ViewInt32Vector(kv_indptr, "kv_indptr"));
  KILN_ASSIGN_OR_RETURN(auto indices, ViewInt32Vector(kv_indices, "kv_indices"));
  KILN_ASSIGN_OR_RETURN(auto last, ViewInt32Vector(kv_last_page_len, "kv_last_page_len"));
  if (batch < 0) batch = last.size;  // append: the batch is what the page table says
  if (batch < 1)
    return InvalidArgument("kv_last_page_len: expected at least one request, found shape " +
                           ShapeText(kv_last_page_len));
  if (indptr.size != batch + 1)
    return InvalidArgument("kv_indptr: expected shape [" + std::to_string(batch + 1) + "] (batch + 1), found " +
                           ShapeText(kv_indptr));
  if (last.size != batch)
    return InvalidArgument("kv_last_page_len: expected shape [" + std::to_string(batch) + "] (batch), found " +
                           ShapeText(kv_last_page_len));
  if (indices.size < min_indices)
    return InvalidArgument("kv_indices: the plan's page table addresses " + std::to_string(min_indices) +
                           " entries (kv_indptr[batch]), found shape " + ShapeText(kv_indices));
  table.indptr = indptr;
  table.indices = indices;
  table.last_page_len = last;
  return table;
}

Status CheckWorkspace(void* workspace, size_t given, size_t needed,
                      std::span<const std::pair<const TensorView*, const char*>> tensors) {
  if (needed == 0) return OkStatus();
  if (workspace == nullptr)
    return InvalidArgument("workspace: NULL, but the plan splits the KV and needs " + std::to_string(needed) +
                           " bytes (plan.workspace_bytes())");
  if (given < needed)
    return InvalidArgument("workspace_bytes: the plan needs " + std::to_string(needed) + " bytes, found " +
                           std::to_string(given));
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0)
    return InvalidArgument("workspace: pointer " + PointerText(workspace) + " is not 16-byte aligned");
  const uintptr_t ws_begin = reinterpret_cast<uintptr_t>(workspace), ws_end = ws_begin + needed;
  for (const auto& [t, name] : tensors) {
    const ByteExtent e = ExtentOf(*t);
    if (e.begin != e.end && e.begin < ws_end && ws_begin < e.end)
      return InvalidArgument(std::string("workspace and ") + name + " overlap in memory (workspace " +
                             PointerText(ws_begin) + "..." + PointerText(ws_end) + ", " + name + " " +
                             PointerText(e.begin) + "..." + PointerText(e.end) + "); they must be separate memory");
  }
  return OkStatus();
}

}  // namespace kiln::client
