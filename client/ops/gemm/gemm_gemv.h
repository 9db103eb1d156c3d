// gemm's small-M path (docs/kernels-gemm.md, "Small M: the GEMV kernels"): for M <= 16
// (gemm::kGemvMaxRows) kiln::ops::gemm launches a GEMV kernel of op gemm_gemv, which streams
// each row of B once, instead of a tensor-core tactic whose 64-row tile would be mostly padding:
// fp32 FMAs at M 1 (gemm::kGemvScalarMaxRows), mma.sync above, and a wide mma.sync kernel for M 17
// to 32 (gemm::kGemvWideMaxRows) that kiln::ops::gemm takes only with KILN_GEMM_GEMV_WIDE=1
// (measured on an H100: 3-4 % faster at some shapes, 34 % slower at Llama's down projection).
// KILN_GEMM_GEMV=0 (a diagnostic control, read once per process) keeps every M on the tile
// kernel; a tactic forced by the caller (LaunchGemmPlan, kiln::tune) or by KILN_FORCE_TACTIC runs
// the tile kernel at any M.
#pragma once

#include "client/ops/gemm/gemm_plan.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// The shapes the GEMV kernels win on a device of `sms` multiprocessors (H200, 2026-12-05, against
// the tile kernel's heuristic tactic): M 1 always (the fp32 kernel: 1.03-1.36x at the
// Llama-3.1-8B layers); M 2..kGemvMaxRows while B's blocks of 16 rows fit on the SMs at once
// (N <= 16 * kGemvBlocksPerSm * sms: qkv and o 1.22-1.31x, down even) — beyond, many short blocks
// lose to the persistent tile kernel (gate-up, N 28672: 0.93-0.95x). `max_rows`: kGemvMaxRows, or
// kGemvWideMaxRows with the wide kernel allowed (the same fit rule above M 16).
bool GemmGemvSuits(int64_t m, int64_t n, int sms, int64_t max_rows = gemm::kGemvMaxRows);
// Whether a call of `plan` takes a GEMV kernel when no tactic is forced: GemmGemvSuits (up to
// kGemvWideMaxRows rows with KILN_GEMM_GEMV_WIDE=1, off by default) and the path on
// (KILN_GEMM_GEMV, on unless 0).
bool GemmTakesGemv(const GemmPlan& plan, int sms);
// 1 / 0: the GEMV path on / off as if KILN_GEMM_GEMV said so; -1: as the environment says.
void SetGemmGemvForTesting(int on);
// 1 / 0: the wide kernel allowed / not as if KILN_GEMM_GEMV_WIDE said so; -1: the environment.
void SetGemmGemvWideForTesting(int on);

// Launches the GEMV kernel of M for a validated plan with 1 <= M <= kGemvWideMaxRows
// (INVALID_ARGUMENT otherwise); M = 0 launches nothing.
Status LaunchGemmGemv(const GemmPlan& plan, void* stream);

// The op gemm_gemv (kernels/traces/gemm_gemv.json; internal): gemm's arguments and checks
// (kiln/ops/gemm.h), d = a · bᵀ (+ bias) (+ beta · c) by the GEMV kernel whatever the switch
// says; a of more than kGemvWideMaxRows rows is refused.
Status GemmGemv(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView* bias,
                const TensorView* c, double beta, void* stream);

}  // namespace kiln::client
