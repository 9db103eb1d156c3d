#include "client/ops/gemm/gemm_launch.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "client/core/api/binary_switch.h"
#include "client/core/driver/devices.h"
#include "client/core/loader/kernel_launch.h"

namespace kiln::client {

// Map nodes do not move: the pointers handed out stay valid.
StatusOr<const GemmDeviceFacts*> GemmFactsOf(const CudaDriver& driver, int device) {
  static std::mutex mutex;
  static std::map<int, GemmDeviceFacts> known;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(device); it != known.end()) return &it->second;
  }
  KILN_ASSIGN_OR_RETURN(const DeviceInfo info, DescribeDevice(driver, device));
  std::lock_guard<std::mutex> lock(mutex);
  return &known.try_emplace(device, GemmDeviceFacts{info.multiprocessors, info.name}).first->second;
}

Status EncodeGemmOperand(const CudaDriver& driver, DType dtype, const void* data, int64_t rows, int64_t k,
                         int64_t row_stride, int box_rows, const char* name, gemm::GemmTensorMap* out) {
  static_assert(sizeof(CUtensorMap) == sizeof(gemm::GemmTensorMap), "GemmTensorMap mirrors CUtensorMap");
  CUtensorMap map;
  // fp8 travels as bytes (TMA copies; wgmma reads them as e4m3): a box row is 128 bytes either
  // way, one swizzle row (kTileK 16-bit elements, kFp8ScaleBlock fp8 ones).
  const bool fp8 = dtype == DType::kFloat8E4M3;
  const cuuint64_t element_bytes = fp8 ? 1 : 2;
  const CUtensorMapDataType type = fp8                         ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride) * element_bytes};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(fp8 ? gemm::kFp8ScaleBlock : gemm::kTileK),
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = driver.cuTensorMapEncodeTiled(&map, type, 2, const_cast<void*>(data), dims, strides, box,
                                                   element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                   CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status(StatusCode::kCudaError, std::string("cuTensorMapEncodeTiled of ") + name + " [" +
                                              std::to_string(rows) + ", " + std::to_string(k) +
                                              "]: " + driver.ErrorText(r));
  std::memcpy(out, &map, sizeof map);
  return OkStatus();
}

Status EncodeGemmOperands(const CudaDriver& driver, const GemmOperands& operands, const gemm::GemmTactic& tactic,
                          gemm::GemmParams* params) {
  KILN_RETURN_IF_ERROR(EncodeGemmOperand(driver, operands.dtype, operands.a, operands.a_rows, operands.k,
                                         operands.a_row_stride, tactic.tile_m, "a", &params->a_map));
  // Multicast: each block of a cluster loads its part of B's tile (tile_n / multicast rows);
  // silu_and_mul: the tile's gate rows and its up rows, a half each.
  return EncodeGemmOperand(driver, operands.dtype, operands.b, operands.b_rows, operands.k, operands.b_row_stride,
                           tactic.tile_n / tactic.multicast / operands.b_halves, "b", &params->b_map);
}

bool GemmTmaStoreAllowed() {
  // A diagnostic control (docs/diagnostic-controls.md): KILN_GEMM_TMA_STORE=0 makes the consumers
  // store D themselves, to measure the TMA-store epilogue against that or rule it out.
  static BinarySwitch allowed("KILN_GEMM_TMA_STORE", true,
                              "gemm's TMA-store epilogue is OFF in this process (a diagnostic control; the default "
                              "stores D through TMA where it can, docs/kernels-gemm.md)");
  return allowed.On();
}

namespace {

BinarySwitch& GemmProgrammaticLaunchSwitch() {
  static BinarySwitch s("KILN_GEMM_PDL", false,
                        "the gemm family is launched as programmatic dependents in this process (off by default: "
                        "slower at small M on the H200, docs/client.md)");
  return s;
}

}  // namespace

bool GemmProgrammaticLaunch() { return GemmProgrammaticLaunchSwitch().On(); }

void SetGemmProgrammaticLaunchForTesting(int on) {
  GemmProgrammaticLaunchSwitch().SetForTesting(on < 0 ? -1 : on != 0 ? 1 : 0);
}

Status EncodeGemmOutput(const CudaDriver& driver, const gemm::GemmTactic& tactic, const GemmOutput& out,
                        gemm::GemmParams* params) {
  params->d_store = 0;
  if (!GemmTmaStoreAllowed()) return OkStatus();
  const int element_bytes = static_cast<int>(DTypeSize(out.dtype));
  const int out_tile_n = out.silu_and_mul ? tactic.tile_n / 2 : tactic.tile_n;
  const bool suits = !out.with_c && out.m > 0 &&
                     gemm::GemmHasStoreStaging(tactic.tile_m, tactic.tile_n, tactic.stages, tactic.split_k, out.grouped,
                                               tactic.multicast) &&
                     gemm::GemmStagedStoresFit(out_tile_n, element_bytes, out.grouped, out.fp8_inputs) &&
                     reinterpret_cast<uintptr_t>(out.d) % 16 == 0 && (out.row_stride * element_bytes) % 16 == 0;
  if (!suits) return OkStatus();
  const CUtensorMapDataType type = out.dtype == DType::kFloat32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : out.dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                   : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(out.n), static_cast<cuuint64_t>(out.m)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(out.row_stride * element_bytes)};
  // One box is 128-byte rows of the staging buffer, swizzled as the kernel writes them
  // (StagingOffset in gemm_sm90.cuh); a chunk of the epilogue is several boxes.
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(gemm::GemmStoreBoxColumns(element_bytes)),
                             static_cast<cuuint32_t>(gemm::kRowsPerConsumer)};
  const cuuint32_t element_strides[2] = {1, 1};
  CUtensorMap map;
  const CUresult r = driver.cuTensorMapEncodeTiled(&map, type, 2, out.d, dims, strides, box, element_strides,
                                                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                   CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return Status(StatusCode::kCudaError, "cuTensorMapEncodeTiled of d [" + std::to_string(out.m) + ", " +
                                              std::to_string(out.n) + "]: " + driver.ErrorText(r));
  std::memcpy(&params->d_map, &map, sizeof map);
  params->d_store = 1;
  return OkStatus();
}

namespace {

// How many clusters of a split-K or multicast kernel run at once (the driver's occupancy
// calculator knows how the GPCs hold clusters; SMs / cluster blocks can be too many), asked once
// per function and launch shape (the shape in the key too: a function handle can be reused
// after an unload).
StatusOr<int> ActiveClusters(const CudaDriver& driver, CUfunction function, const gemm::GemmTactic& tactic,
                             unsigned block, unsigned smem, int sms, const char* api) {
  static std::mutex mutex;
  static std::map<std::tuple<CUfunction, int, unsigned, unsigned>, int> known;
  const int cluster = gemm::GemmClusterBlocks(tactic);
  const auto key = std::make_tuple(function, cluster, block, smem);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  CUlaunchConfig config{};
  config.gridDimX = static_cast<unsigned>(cluster);
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = block;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = smem;
  int clusters = 0;
  const CUresult r = driver.cuOccupancyMaxActiveClusters(&clusters, function, &config);
  if (r != CUDA_SUCCESS)
    return Status(StatusCode::kCudaError, std::string(api) + ": cuOccupancyMaxActiveClusters of the gemm's clusters (" +
                                              std::to_string(cluster) + " blocks): " + driver.ErrorText(r));
  if (clusters < 1)
    return Status(StatusCode::kFailedPrecondition, std::string(api) + ": not one cluster of " +
                                                       std::to_string(cluster) +
                                                       " gemm blocks fits on this GPU at once (" +
                                                       std::to_string(smem) + " bytes of shared memory each)");
  clusters = std::min(clusters, sms / cluster);
  std::lock_guard<std::mutex> lock(mutex);
  known.emplace(key, clusters);
  return clusters;
}

}  // namespace

StatusOr<long long> PersistentGemmBlocks(const CudaDriver& driver, const PreparedLaunch& ready,
                                         const gemm::GemmTactic& tactic, int64_t m, int64_t n, int sms,
                                         const char* api) {
  const long long units = gemm::GemmClusterUnits(m, n, tactic);
  int slots = sms;
  if (gemm::GemmClusterBlocks(tactic) > 1) {
    const EntryLaunchReady& e = ready.launch->entry();
    KILN_ASSIGN_OR_RETURN(slots, ActiveClusters(driver, e.function, tactic, e.block, e.dynamic_smem, sms, api));
  }
  return std::min<long long>(units, slots) * gemm::GemmClusterBlocks(tactic);
}

Status LaunchGemmKernel(const CudaDriver& driver, const PreparedLaunch& ready, const char* entry, long long blocks,
                        gemm::GemmParams& params, void* stream) {
  const EntryLaunchReady& e = ready.launch->entry();
  LaunchConfig config;
  config.grid.x = static_cast<unsigned>(blocks);
  config.block.x = e.block;
  config.dynamic_smem_bytes = e.dynamic_smem;
  config.stream = stream;
  config.programmatic_dependent_launch = GemmProgrammaticLaunch();
  void* args[] = {&params};
  return LaunchFunction(driver, e.function, config, args, entry, &ready.launch->library->info);
}

Status CheckGemmBlock(unsigned block, int tile_m, const char* api, const char* op) {
  if (block == static_cast<unsigned>(gemm::GemmThreads(tile_m))) return OkStatus();
  return Status(StatusCode::kFailedPrecondition, std::string(api) + ": the daemon's " + op + " kernel has a block of " +
                                                     std::to_string(block) + " threads, the contract says " +
                                                     std::to_string(gemm::GemmThreads(tile_m)) + " for tile_m " +
                                                     std::to_string(tile_m) + " (kernels tree and client out of step)");
}

}  // namespace kiln::client
