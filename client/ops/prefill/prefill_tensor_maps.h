// The tensor maps of the Hopper prefill kernel's TMA producer (ragged K/V, or the paged caches
// at pages of 8 and up): encoded per run
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

// Whether a call suits TMA: the Hopper kernel (tile_rows 128), ragged K/V or pages of
// prefill::kMinTmaPage positions and up, the control on, and rows (ragged) or pages (paged: one
// past them names an invalid page) a TMA coordinate can name. The call's checks already made
// the data 16-byte aligned and the strides multiples of 8 elements; those TMA steps over must
// also be positive and under 2^40 bytes.
bool PrefillUsesTmaKv(bool paged, int page_size, int tile_rows, const prefill::KilnBatchPrefillParams& p);

// Encodes k_map and v_map from p's k, v, strides and sizes (prefill_contract.h: 3-D maps of
// ragged K/V, 4-D maps of the paged caches) and sets kv_tma = 1. page_size 0: ragged.
Status EncodePrefillKvMaps(const CudaDriver& driver, DType dtype, int head_dim, int page_size,
                           prefill::KilnBatchPrefillParams* p);

}  // namespace kiln::client
