#include "client/ops/prefill/prefill_tensor_maps.h"

#include <climits>
#include <cstring>
#include <initializer_list>
#include <string>

#include "client/core/api/binary_switch.h"

namespace kiln::client {
namespace {

BinarySwitch& TmaKvSwitch() {
  // A diagnostic control (docs/diagnostic-controls.md): KILN_PREFILL_TMA_KV=0 makes the Hopper
  // prefill kernel's producer copy K/V with cp.async, as it does at pages of 1 to 4, to measure
  // the TMA producer against it or rule it out.
  static BinarySwitch s("KILN_PREFILL_TMA_KV", true,
                        "the Hopper prefill kernel loads K/V with cp.async, not TMA, in this process (a "
                        "diagnostic control; docs/kernels-prefill.md)");
  return s;
}

// A tensor map of rank 3 (ragged) or 4 (paged): dims innermost first, byte strides of dims 1..,
// the box.
struct MapShape {
  int rank = 0;
  cuuint64_t dims[4] = {};
  cuuint64_t strides[3] = {};
  cuuint32_t box[4] = {};
};

Status Encode(const CudaDriver& driver, DType dtype, const void* data, const MapShape& m, const char* name,
              prefill::KilnPrefillTensorMap* out) {
  static_assert(sizeof(CUtensorMap) == sizeof(prefill::KilnPrefillTensorMap), "KilnPrefillTensorMap mirrors it");
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUtensorMap map;
  const CUresult r = driver.cuTensorMapEncodeTiled(&map, type, static_cast<cuuint32_t>(m.rank), const_cast<void*>(data),
                                                   m.dims, m.strides, m.box, element_strides,
                                                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string shape, strides;
    for (int i = m.rank - 1; i >= 0; --i) shape += std::to_string(m.dims[i]) + (i > 0 ? ", " : "");
    for (int i = m.rank - 2; i >= 0; --i) strides += std::to_string(m.strides[i]) + (i > 0 ? ", " : "");
    return Status(StatusCode::kCudaError, std::string("cuTensorMapEncodeTiled of ") + name + " [" + shape +
                                              "], byte strides [" + strides + "]: " + driver.ErrorText(r));
  }
  std::memcpy(out, &map, sizeof map);
  return OkStatus();
}

// A map of 16-bit elements from its dims and element strides (dims 1.., innermost first) and
// its box: a 64-column block of one head, PrefillTmaBoxRows rows.
MapShape Shape(std::initializer_list<long long> dims, std::initializer_list<long long> strides, int box_rows) {
  const cuuint64_t element_bytes = 2;
  MapShape m;
  for (const long long d : dims) m.dims[m.rank++] = static_cast<cuuint64_t>(d);
  int i = 0;
  for (const long long s : strides) m.strides[i++] = static_cast<cuuint64_t>(s) * element_bytes;
  for (int d = 0; d < m.rank; ++d) m.box[d] = 1;
  m.box[0] = prefill::kPrefillTmaBoxColumns;
  m.box[2] = static_cast<cuuint32_t>(box_rows);
  return m;
}

// Ragged k or v: (head_dim, heads, rows). A stride the call's checks left free (one head, one
// row) is never stepped over: any valid value serves.
MapShape RaggedShape(int head_dim, long long rows, int heads, long long token_stride, long long head_stride) {
  return Shape({head_dim, heads, rows},
               {heads > 1 ? head_stride : head_dim, rows > 1 ? token_stride : static_cast<long long>(heads) * head_dim},
               prefill::PrefillTmaBoxRows(0));
}

// A paged cache: (head_dim, heads, page_size, pages), dense inside a page, pages page_stride
// elements apart (one page: never stepped over).
MapShape PagedShape(int head_dim, int page_size, long long pages, int heads, long long page_stride) {
  const long long page_elements = static_cast<long long>(page_size) * heads * head_dim;
  return Shape({head_dim, heads, page_size, pages},
               {head_dim, static_cast<long long>(heads) * head_dim, pages > 1 ? page_stride : page_elements},
               prefill::PrefillTmaBoxRows(page_size));
}

}  // namespace

bool PrefillTmaKvAllowed() { return TmaKvSwitch().On(); }

void SetPrefillTmaKvForTesting(int on) { TmaKvSwitch().SetForTesting(on < 0 ? -1 : on != 0 ? 1 : 0); }

bool PrefillUsesTmaKv(bool paged, int page_size, int tile_rows, const prefill::KilnBatchPrefillParams& p) {
  if (!prefill::UsesSm90Kernel(tile_rows) || p.total_kv <= 0) return false;
  // A stride TMA steps over: positive, a multiple of 16 bytes (8 elements), under 2^40 bytes.
  auto suits = [](long long stride, bool stepped) {
    return !stepped || (stride > 0 && stride % 8 == 0 && stride < (1ll << 39));
  };
  if (paged) {
    // Page coordinate total_kv names an invalid page: it must fit an int too.
    if (page_size < prefill::kMinTmaPage || p.total_kv >= INT_MAX) return false;
    const bool pages = p.total_kv > 1;
    if (!suits(p.k_stride_token, pages) || !suits(p.v_stride_token, pages)) return false;
  } else {
    if (p.total_kv > INT_MAX) return false;
    const bool heads = p.num_kv_heads > 1, rows = p.total_kv > 1;
    if (!suits(p.k_stride_head, heads) || !suits(p.v_stride_head, heads) || !suits(p.k_stride_token, rows) ||
        !suits(p.v_stride_token, rows))
      return false;
  }
  return PrefillTmaKvAllowed();
}

Status EncodePrefillKvMaps(const CudaDriver& driver, DType dtype, int head_dim, int page_size,
                           prefill::KilnBatchPrefillParams* p) {
  const bool paged = page_size > 0;
  const MapShape k = paged ? PagedShape(head_dim, page_size, p->total_kv, p->num_kv_heads, p->k_stride_token)
                           : RaggedShape(head_dim, p->total_kv, p->num_kv_heads, p->k_stride_token, p->k_stride_head);
  const MapShape v = paged ? PagedShape(head_dim, page_size, p->total_kv, p->num_kv_heads, p->v_stride_token)
                           : RaggedShape(head_dim, p->total_kv, p->num_kv_heads, p->v_stride_token, p->v_stride_head);
  KILN_RETURN_IF_ERROR(Encode(driver, dtype, p->k, k, paged ? "k_cache" : "k", &p->k_map));
  KILN_RETURN_IF_ERROR(Encode(driver, dtype, p->v, v, paged ? "v_cache" : "v", &p->v_map));
  p->kv_tma = 1;
  return OkStatus();
}

}  // namespace kiln::client
