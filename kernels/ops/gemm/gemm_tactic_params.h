// What the gemm family's generators share: the element types (dtype for A and B, out_dtype for
// D, "auto" meaning dtype) and the compile budget, and the tactic params (tile_m, tile_n, stages,
// group_m): their ParamInfo, the tactic a request names (stages "auto": the most that fit),
// refused with the shared-memory figures when it does not fit, and the tactic's part of the URI
// and the config.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/jit/op_params.h"
#include "kernels/ops/generator_support.h"
#include "kiln/gemm/gemm_contract.h"

namespace kiln::kernels {

inline constexpr DTypeInfo kGemmInTypes[] = {kBf16Info, kFp16Info};
inline constexpr DTypeInfo kGemmOutTypes[] = {kBf16Info, kFp16Info, kFp32Info};
// Host memory of one compile: see the measurement in tests/kernels/gemm_compile_test.cpp (peak
// RSS of a process compiling tactics in turn); 512 MB, the engine's default, holds it.
inline constexpr int64_t kGemmCompileMemoryMb = 512;

// dtype and out_dtype, with their helps.
std::vector<ParamInfo> GemmDTypeParams(const char* dtype_help, const char* out_dtype_help);
struct GemmTypes {
  const DTypeInfo* in;
  const DTypeInfo* out;
};
GemmTypes GemmTypesOf(const ParamValues& values);
// The fp8 ops (fp8_gemm, the grouped fp8 ops): A and B e4m3 by the op, out_dtype bf16 or fp32.
inline constexpr DTypeInfo kE4m3Info = {"e4m3", "__nv_fp8_e4m3", 1};
inline constexpr DTypeInfo kFp8GemmOutTypes[] = {kBf16Info, kFp32Info};
ParamInfo Fp8GemmOutDTypeParam();
GemmTypes Fp8GemmTypesOf(const ParamValues& values);
// The grouped fp8 ops' D also as e4m3 codes with a scale per row and 128 columns: only with the
// silu_and_mul epilogue (gemm_contract.h, GemmEpilogue), which the generator checks.
inline constexpr DTypeInfo kFp8CodesInfo = {"fp8_e4m3", "__nv_fp8_e4m3", 1};
inline constexpr DTypeInfo kGroupedFp8GemmOutTypes[] = {kBf16Info, kFp32Info, kFp8CodesInfo};
ParamInfo GroupedFp8GemmOutDTypeParam();
GemmTypes GroupedFp8GemmTypesOf(const ParamValues& values);

// tile_m, tile_n, stages, group_m, in that order.
std::vector<ParamInfo> GemmTacticParams();
// split_k (gemm and fp8_gemm).
ParamInfo GemmSplitKParam();
// multicast (gemm).
ParamInfo GemmMulticastParam();

// The tactic of `values` (split_k and multicast given: gemm's own params; grouped_gemm never
// splits nor multicasts).
absl::StatusOr<gemm::GemmTactic> GemmTacticOf(std::string_view op, const ParamValues& values, int split_k, bool grouped,
                                              int multicast = 1);

// "t128x256x64s4g8", "k<split>" after it when split, "m<blocks>" with multicast; fp8, K per
// stage 128: "t128x256x128s4g8".
std::string GemmTacticUri(const gemm::GemmTactic& tactic, bool fp8 = false);

// The spec params and the config defines (KILN_GEMM_TILE_M ... KILN_GEMM_GROUP_M) of the tactic.
std::vector<std::pair<std::string, std::string>> GemmTacticSpecParams(const gemm::GemmTactic& tactic);
std::vector<std::pair<std::string, std::string>> GemmTacticDefines(const gemm::GemmTactic& tactic);

}  // namespace kiln::kernels
