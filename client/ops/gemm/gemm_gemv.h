// gemm's small-M path (docs/kernels-gemm.md, "Small M: the GEMV kernels"): for M <= 16
// (gemm::kGemvMaxRows) kiln::ops::gemm launches a GEMV kernel of op gemm_gemv, which streams
// each row of B once, instead of a tensor-core tactic whose 64-row tile would be mostly padding:
// fp32 FMAs up to M 4 (gemm::kGemvScalarMaxRows), mma.sync above.
// KILN_GEMM_GEMV (read once per process) turns the path on (1) or off (0); its default is
// kGemmGemvByDefault. A tactic forced by the caller (LaunchGemmPlan, kiln::tune) or by
// KILN_FORCE_TACTIC runs the tile kernel at any M.
#pragma once

#include "client/ops/gemm/gemm_plan.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

// Off until the kernels have run on the H200: they were written on 2026-12-05 while no GPU was
// lent, and are proven only by their compiles, the no-op-driver launch and a CPU model of the
// mma fragment mapping. The GPU tests force the path on (SetGemmGemvForTesting).
inline constexpr bool kGemmGemvByDefault = false;

// Whether a call of `plan` takes the GEMV kernel when no tactic is forced: M in 1..kGemvMaxRows,
// and the path on (KILN_GEMM_GEMV, kGemmGemvByDefault).
bool GemmTakesGemv(const GemmPlan& plan);
// 1 / 0: the GEMV path on / off as if KILN_GEMM_GEMV said so; -1: as the environment says.
void SetGemmGemvForTesting(int on);

// Launches the GEMV kernel of M for a validated plan with 1 <= M <= kGemvMaxRows
// (INVALID_ARGUMENT otherwise); M = 0 launches nothing.
Status LaunchGemmGemv(const GemmPlan& plan, void* stream);

// The op gemm_gemv (kernels/traces/gemm_gemv.json; internal): gemm's arguments and checks
// (kiln/ops/gemm.h), d = a · bᵀ (+ bias) (+ beta · c) by the GEMV kernel whatever the switch
// says; a of more than kGemvMaxRows rows is refused.
Status GemmGemv(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView* bias,
                const TensorView* c, double beta, void* stream);

}  // namespace kiln::client
