// The tensor maps of the Hopper prefill kernel's TMA producer (ragged K/V): encoded per run
// from the validated call (pointers and strides are the call's, not the plan's), so the run
// stays free of data-dependent host work and CUDA-graph safe: the maps travel by value in the
// kernel parameters.
#pragma once

#include "client/core/driver/cuda_driver.h"
#include "kiln/prefill/prefill_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// Whether TMA may load ragged K/V (the diagnostic control KILN_PREFILL_TMA_KV, default on).
bool PrefillTmaKvAllowed();
// 0 or 1: forced; -1: as the environment says again.
void SetPrefillTmaKvForTesting(int on);

// Whether a ragged call suits TMA: the Hopper kernel (tile_rows 128), the control on, and
// rows a TMA coordinate can name (k and v rows <= INT_MAX). The call's checks already made the
// data 16-byte aligned and the strides multiples of 8 elements.
bool PrefillUsesTmaKv(bool paged, int tile_rows, const prefill::KilnBatchPrefillParams& p);

// Encodes k_map and v_map (3-D: head_dim, num_kv_heads, rows; box kPrefillTmaBoxColumns x 1 x
// kSm90TileKv, 128-byte swizzle) from p's k, v, strides and sizes, and sets kv_tma = 1.
Status EncodePrefillKvMaps(const CudaDriver& driver, DType dtype, int head_dim, prefill::KilnBatchPrefillParams* p);

}  // namespace kiln::client
