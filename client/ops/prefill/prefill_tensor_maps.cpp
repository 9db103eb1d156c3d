#include "client/ops/prefill/prefill_tensor_maps.h"

#include <climits>
#include <cstring>
#include <string>

#include "client/core/api/binary_switch.h"

namespace kiln::client {
namespace {

BinarySwitch& TmaKvSwitch() {
  // A diagnostic control (docs/diagnostic-controls.md): KILN_PREFILL_TMA_KV=0 makes the Hopper
  // prefill kernel's producer copy ragged K/V with cp.async, as it does paged K/V, to measure the
  // TMA producer against it or rule it out.
  static BinarySwitch s("KILN_PREFILL_TMA_KV", true,
                        "batch_prefill_ragged loads K/V with cp.async, not TMA, in this process (a diagnostic "
                        "control; docs/kernels-prefill.md)");
  return s;
}

// One operand's map: dims (head_dim, heads, rows), strides in bytes. A stride the call's checks
// left free (one head, one row) is never stepped over: any valid value serves.
Status EncodeOne(const CudaDriver& driver, DType dtype, int head_dim, const void* data, long long rows, int heads,
                 long long token_stride, long long head_stride, const char* name, prefill::KilnPrefillTensorMap* out) {
  static_assert(sizeof(CUtensorMap) == sizeof(prefill::KilnPrefillTensorMap), "KilnPrefillTensorMap mirrors it");
  const cuuint64_t element_bytes = 2;
  const cuuint64_t head_bytes = heads > 1 ? static_cast<cuuint64_t>(head_stride) * element_bytes
                                          : static_cast<cuuint64_t>(head_dim) * element_bytes;
  const cuuint64_t row_bytes = rows > 1 ? static_cast<cuuint64_t>(token_stride) * element_bytes
                                        : static_cast<cuuint64_t>(heads) * head_dim * element_bytes;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {head_bytes, row_bytes};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(prefill::kPrefillTmaBoxColumns), 1,
                             static_cast<cuuint32_t>(prefill::kSm90TileKv)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type = dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUtensorMap map;
  const CUresult r = driver.cuTensorMapEncodeTiled(&map, type, 3, const_cast<void*>(data), dims, strides, box,
                                                   element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                   CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status(StatusCode::kCudaError, std::string("cuTensorMapEncodeTiled of ") + name + " [" +
                                              std::to_string(rows) + ", " + std::to_string(heads) + ", " +
                                              std::to_string(head_dim) + "], strides [" + std::to_string(token_stride) +
                                              ", " + std::to_string(head_stride) + ", 1]: " + driver.ErrorText(r));
  std::memcpy(out, &map, sizeof map);
  return OkStatus();
}

}  // namespace

bool PrefillTmaKvAllowed() { return TmaKvSwitch().On(); }

void SetPrefillTmaKvForTesting(int on) { TmaKvSwitch().SetForTesting(on < 0 ? -1 : on != 0 ? 1 : 0); }

bool PrefillUsesTmaKv(bool paged, int tile_rows, const prefill::KilnBatchPrefillParams& p) {
  if (paged || !prefill::UsesSm90Kernel(tile_rows) || p.total_kv <= 0 || p.total_kv > INT_MAX) return false;
  // A stride TMA steps over: positive, a multiple of 16 bytes (8 elements), under 2^40 bytes.
  auto suits = [](long long stride, bool stepped) {
    return !stepped || (stride > 0 && stride % 8 == 0 && stride < (1ll << 39));
  };
  const bool heads = p.num_kv_heads > 1, rows = p.total_kv > 1;
  if (!suits(p.k_stride_head, heads) || !suits(p.v_stride_head, heads) || !suits(p.k_stride_token, rows) ||
      !suits(p.v_stride_token, rows))
    return false;
  return PrefillTmaKvAllowed();
}

Status EncodePrefillKvMaps(const CudaDriver& driver, DType dtype, int head_dim, prefill::KilnBatchPrefillParams* p) {
  KILN_RETURN_IF_ERROR(EncodeOne(driver, dtype, head_dim, p->k, p->total_kv, p->num_kv_heads, p->k_stride_token,
                                 p->k_stride_head, "k", &p->k_map));
  KILN_RETURN_IF_ERROR(EncodeOne(driver, dtype, head_dim, p->v, p->total_kv, p->num_kv_heads, p->v_stride_token,
                                 p->v_stride_head, "v", &p->v_map));
  p->kv_tma = 1;
  return OkStatus();
}

}  // namespace kiln::client
