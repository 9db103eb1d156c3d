// What the launches of gemm and grouped_gemm share: the device facts the heuristics and the
// blocklist need (asked of the driver once per ordinal) and the TMA tensor maps of the K-major
// operands (encoded per call: 0.07 µs each on the H200 host, docs/kernels-gemm.md).
#pragma once

#include <cstdint>
#include <string>

#include "client/core/driver/cuda_driver.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

struct GemmDeviceFacts {
  int sms = 0;
  std::string name;
};
// The facts of device `ordinal`; the entry lives as long as the process.
StatusOr<const GemmDeviceFacts*> GemmFactsOf(const CudaDriver& driver, int ordinal);

// The tensor map of a K-major operand [rows, k] with row stride `row_stride` elements, read in
// boxes of 128 bytes (kTileK 16-bit elements, kFp8ScaleBlock fp8 ones) x box_rows with the
// 128-byte swizzle (the layout wgmma reads; the contract).
// Out-of-range boxes read zeros. kCudaError naming `name` and the shape when the driver refuses.
Status EncodeGemmOperand(const CudaDriver& driver, DType dtype, const void* data, int64_t rows, int64_t k,
                         int64_t row_stride, int box_rows, const char* name, gemm::GemmTensorMap* out);

// FAILED_PRECONDITION unless the loaded kernel's block (`block`, from the daemon's launch hint)
// is the contract's for tile_m: the kernels tree and the client would be out of step.
Status CheckGemmBlock(unsigned block, int tile_m, const char* api, const char* op);

}  // namespace kiln::client
