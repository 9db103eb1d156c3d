// What the launches of the gemm family share: the device facts the heuristics and the
// blocklist need (asked of the driver once per ordinal) and the TMA tensor maps of the K-major
// operands (encoded per call: 0.07 µs each on the H200 host, docs/kernels-gemm.md), and the
// persistent launch itself.
#pragma once

#include <cstdint>
#include <string>

#include "client/core/driver/cuda_driver.h"
#include "client/core/loader/launch_preparation.h"
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

// Both operands' maps into params: a [a_rows, k] in boxes of tile_m rows, b [b_rows, k] in boxes
// of tile_n / multicast / b_halves rows (every op of the family reads A and B this way; the
// silu_and_mul epilogue loads a tile's gate and up rows as two halves).
struct GemmOperands {
  DType dtype;
  const void* a;
  int64_t a_rows;
  int64_t a_row_stride;
  const void* b;
  int64_t b_rows;
  int64_t b_row_stride;
  int64_t k;
  int b_halves = 1;
};
Status EncodeGemmOperands(const CudaDriver& driver, const GemmOperands& operands, const gemm::GemmTactic& tactic,
                          gemm::GemmParams* params);

// What the kernel writes: D [m, n] (n: D's columns; with the silu_and_mul epilogue half of
// B's rows per group), dense or grouped (rows of all groups), with or without beta * C.
struct GemmOutput {
  DType dtype;
  void* d;
  int64_t m;
  int64_t n;
  int64_t row_stride;
  bool with_c = false;
  bool grouped = false;
  bool silu_and_mul = false;
  bool fp8_inputs = false;  // e4m3 A and B: fp8_gemm and the grouped fp8 ops
};
// The TMA-store epilogue, when `tactic` has its staging buffers (gemm::GemmHasStoreStaging), the
// kernel stores through them (gemm::GemmStagedStoresFit), no beta * C is added and D
// suits TMA (16-byte aligned, rows a multiple of 16 bytes apart): D's tensor map in
// params->d_map and d_store 1. Otherwise, or under KILN_GEMM_TMA_STORE=0 (GemmTmaStoreAllowed, a
// diagnostic control read once per process), d_store 0 (the consumers store D themselves).
// Grouped, the kernel stores through the map only a consumer's rows inside one group. Only an
// encoding failure is an error.
bool GemmTmaStoreAllowed();
// D of a dense product's plan (GemmPlan, Fp8GemmPlan: out_dtype, d, m, n, d_row_stride).
template <class Plan>
GemmOutput DenseGemmOutput(const Plan& plan, bool with_c, bool fp8_inputs) {
  return {.dtype = plan.out_dtype,
          .d = plan.d,
          .m = plan.m,
          .n = plan.n,
          .row_stride = plan.d_row_stride,
          .with_c = with_c,
          .fp8_inputs = fp8_inputs};
}
Status EncodeGemmOutput(const CudaDriver& driver, const gemm::GemmTactic& tactic, const GemmOutput& out,
                        gemm::GemmParams* params);

// How many persistent blocks a dense product (gemm, fp8_gemm) of M x N launches with `tactic`:
// one cluster of split_k blocks per tile (a block per tile without a split; with multicast a
// cluster of two per pair of tile rows), at most as many as run at once on `sms` SMs (for a
// cluster, what the driver's occupancy calculator says the loaded kernel gets: GPCs do not
// divide evenly; asked once per function and shape).
StatusOr<long long> PersistentGemmBlocks(const CudaDriver& driver, const PreparedLaunch& ready,
                                         const gemm::GemmTactic& tactic, int64_t m, int64_t n, int sms,
                                         const char* api);

// Whether the family's kernels are launched as programmatic dependents (LaunchConfig::
// programmatic_dependent_launch; the kernels wait with griddepcontrol.wait before any global
// access either way): off by default, on with KILN_GEMM_PDL=1 (read once per process). Measured
// on the H200 it made small-M calls slower (docs/client.md), so it is an opt-in to measure.
// SetGemmProgrammaticLaunchForTesting(1 / 0) overrides the environment, -1 returns to it.
bool GemmProgrammaticLaunch();
void SetGemmProgrammaticLaunchForTesting(int on);

// Launches the loaded kernel of `ready` (the family's kernels have one entry, `entry`) on `blocks`
// persistent blocks in a row with `params` as its one argument.
Status LaunchGemmKernel(const CudaDriver& driver, const PreparedLaunch& ready, const char* entry, long long blocks,
                        gemm::GemmParams& params, void* stream);

// FAILED_PRECONDITION unless the loaded kernel's block (`block`, from the daemon's launch hint)
// is the contract's for tile_m: the kernels tree and the client would be out of step.
Status CheckGemmBlock(unsigned block, int tile_m, const char* api, const char* op);

}  // namespace kiln::client
