// fp8_gemm's small-M path (docs/kernels-gemm.md, "Small M on fp8: the GEMV kernel"): where it
// wins (Fp8GemmGemvWins: one pass of 8 rows of A whose blocks fit on the SMs at once),
// kiln::ops::fp8_gemm launches the GEMV kernel of op fp8_gemm_gemv, which streams each e4m3 row
// of B once on fp8 tensor cores, instead of a tile kernel whose 64-row tile would be mostly
// padding (bench/results/2026-12-06-h200-fp8-gemv.md). KILN_FP8_GEMM_GEMV=0 (a diagnostic
// control, read once per process) keeps every M on the tile kernel; a tactic forced by the caller
// (LaunchFp8GemmPlan, kiln::tune) or by KILN_FORCE_TACTIC runs the tile kernel at any M.
#pragma once

#include "client/ops/gemm/fp8_gemm_plan.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// The shapes the GEMV kernel takes: 1 <= M <= kFp8GemvMaxRows and N a multiple of
// kFp8GemvRowsPerWarp (a warp's rows of B all inside).
bool Fp8GemmGemvSuits(int64_t m, int64_t n);
// The shapes the kernels win on a device of `sms` multiprocessors: M 1-16 (8 rows of a a pass up
// to M 8, the wide entry's one pass of 16 rows above: on an H100, 2026-12-06, qkv, o and down of
// Llama-3.1-8B 1.18-1.61x the tile kernel's heuristic tactic at M 1-8 and 0.99-1.28x at M 9-16)
// while the blocks of the rule's k parts fit on the SMs at once (Fp8GemvKParts,
// kFp8GemvBlocksPerSm; gate-up, N 28672, 448 blocks on 264 places, stays on the tile kernel:
// within 1 % there, 1-3 % slower on the H200).
bool Fp8GemmGemvWins(int64_t m, int64_t n, int sms);
// Whether a call of `plan` takes the GEMV kernel when no tactic is forced: Fp8GemmGemvSuits,
// Fp8GemmGemvWins and the path on (KILN_FP8_GEMM_GEMV, on unless 0).
bool Fp8GemmTakesGemv(const Fp8GemmPlan& plan, int sms);
// 1 / 0: the GEMV path on / off as if KILN_FP8_GEMM_GEMV said so; -1: as the environment says.
void SetFp8GemmGemvForTesting(int on);

// The k parts of a launch over N = `n` rows of B on `sms` multiprocessors: KILN_FP8_GEMM_GEMV_K_PARTS
// (a diagnostic control: 2, 4 or 8; auto or unset: the rule) or SetFp8GemmGemvKPartsForTesting's,
// else gemm::Fp8GemvKParts (the fewest parts whose grid covers the SMs).
int Fp8GemmGemvKParts(int64_t n, int sms);
// 2 / 4 / 8: the parts as if KILN_FP8_GEMM_GEMV_K_PARTS said so; anything else: the environment.
void SetFp8GemmGemvKPartsForTesting(int parts);

// Launches the GEMV kernel for a validated plan whose shape Fp8GemmGemvSuits (INVALID_ARGUMENT
// otherwise) on a device of `sms` multiprocessors (which set the k parts: Fp8GemmGemvKParts); M = 0
// launches nothing.
Status LaunchFp8GemmGemv(const Fp8GemmPlan& plan, int sms, void* stream);

// The op fp8_gemm_gemv (kernels/traces/fp8_gemm_gemv.json; internal): fp8_gemm's arguments and
// checks (kiln/ops/gemm.h), d by the GEMV kernel whatever the switch says; a shape the kernel does
// not take (more than kFp8GemvMaxRows rows of a, N not a multiple of 16) is refused.
Status Fp8GemmGemv(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& a_scales,
                   const TensorView& b_scales, void* stream);

}  // namespace kiln::client
