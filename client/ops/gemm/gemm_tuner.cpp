// kiln::tune (kiln/tune.h) for the gemm family: each op's tuner validates the call as the op
// does, names the bucket, the heuristic's tactic and the candidates, and hands them to the
// measuring loop (tactic_tuner.h) with a launch of the plan at a given tactic.
//
// Candidates: gemm's from its shape model (GemmTuneCandidates: tiles and splits that suit the
// shape); the fp8 and grouped ops' every tile of their space (SpaceTuneCandidates: eight at most,
// no splits), and for fp8_gemm at M <= 64 the 64-row tiles split 2, 4 and 8 ways; then, for all,
// the winner's neighbours (raster groups, one stage fewer).
#include <string>

#include "client/core/api/invalid_argument.h"
#include "client/core/driver/cuda_driver.h"
#include "client/ops/gemm/fp8_gemm_ops.h"
#include "client/ops/gemm/fp8_gemm_plan.h"
#include "client/ops/gemm/gemm_launch.h"
#include "client/ops/gemm/gemm_ops.h"
#include "client/ops/gemm/gemm_plan.h"
#include "client/ops/gemm/gemm_tuning.h"
#include "client/ops/gemm/grouped_gemm_ops.h"
#include "client/ops/gemm/grouped_gemm_plan.h"
#include "client/ops/gemm/tactic_tuner.h"
#include "kiln/gemm/gemm_contract.h"
#include "kiln/tune.h"

namespace kiln::client {
namespace {

Status NothingToTime(const char* api, const char* what) {
  return InvalidArgument(std::string(api) + ": " + what + ": there is nothing to time");
}

// The job's fields every plan of the family fills the same way: the call, its output and the
// heuristic's tactic; the op's tuner adds the candidates and the launch.
template <class Plan>
TacticTuneJob JobOf(const Plan& plan, const char* op, std::string bucket, int64_t rows,
                    const ChosenGemmTactic& heuristic) {
  TacticTuneJob job;
  job.api = plan.api;
  job.op = op;
  job.bucket = std::move(bucket);
  job.device = plan.device;
  job.d = plan.d;
  job.out_dtype = plan.out_dtype;
  job.rows = rows;
  job.cols = plan.n;
  job.row_stride = plan.d_row_stride;
  job.heuristic = heuristic.tactic;
  return job;
}

StatusOr<tune::Report> TuneGemm(const GemmPlan& plan, const tune::Options& options, void* stream) {
  if (plan.m == 0) return NothingToTime(plan.api, "a has no rows");
  KILN_ASSIGN_OR_RETURN(const CudaDriver* driver, CudaDriver::Get());
  KILN_ASSIGN_OR_RETURN(const GemmDeviceFacts* device, GemmFactsOf(*driver, plan.device));
  KILN_ASSIGN_OR_RETURN(const ChosenGemmTactic heuristic, GemmTacticOfCall(plan, /*skip_tuned=*/true));
  TacticTuneJob job = JobOf(plan, gemm::kGemmOp, GemmTuningBucket(plan.dtype, plan.out_dtype, plan.m, plan.n, plan.k),
                            plan.m, heuristic);
  job.candidates = GemmTuneCandidates(plan.m, plan.n, plan.k, device->sms);
  job.launch = [&plan](const gemm::GemmTactic& t, void* s) { return LaunchGemmPlan(plan, t, s); };
  return RunTacticTuning(job, options, stream);
}

StatusOr<tune::Report> TuneFp8Gemm(const Fp8GemmPlan& plan, const tune::Options& options, void* stream) {
  if (plan.m == 0) return NothingToTime(plan.api, "a has no rows");
  KILN_ASSIGN_OR_RETURN(const ChosenGemmTactic heuristic, Fp8GemmTacticOfCall(plan, /*skip_tuned=*/true));
  TacticTuneJob job = JobOf(plan, gemm::kFp8GemmOp,
                            GemmTuningBucket(DType::kFloat8E4M3, plan.out_dtype, plan.m, plan.n, plan.k), plan.m,
                            heuristic);
  job.candidates = SpaceTuneCandidates(gemm::kFp8GemmOp);
  if (plan.m <= 64) {
    // Memory-bound: the 64-row tiles split over clusters too (the heuristic's rule picks one).
    for (int tile_n : {256, 128, 64})
      for (int split : {2, 4, 8})
        job.candidates.push_back({64, tile_n, gemm::GemmMaxStages(64, tile_n, split), 8, split});
  }
  job.launch = [&plan](const gemm::GemmTactic& t, void* s) { return LaunchFp8GemmPlan(plan, t, s); };
  return RunTacticTuning(job, options, stream);
}

StatusOr<tune::Report> TuneGrouped(const GroupedGemmPlan& plan, const char* op, const tune::Options& options,
                                   void* stream) {
  if (plan.rows == 0) return NothingToTime(plan.api, "a has no rows");
  KILN_ASSIGN_OR_RETURN(const ChosenGemmTactic heuristic, GroupedGemmTacticOfCall(plan, /*skip_tuned=*/true));
  const int64_t rows_per_group = plan.masked ? plan.group_stride : (plan.rows + plan.groups - 1) / plan.groups;
  // rows: all of d's; rows past a group's count stay poisoned in every result.
  TacticTuneJob job = JobOf(
      plan, op, GroupedTuningBucket(plan.dtype, plan.out_dtype, plan.groups, rows_per_group, plan.n, plan.k), plan.rows,
      heuristic);
  job.candidates = SpaceTuneCandidates(op);
  job.launch = [&plan](const gemm::GemmTactic& t, void* s) { return LaunchGroupedGemmPlan(plan, t, s); };
  return RunTacticTuning(job, options, stream);
}

}  // namespace
}  // namespace kiln::client

namespace kiln::tune {

using client::GroupedGemmPlan;

StatusOr<Report> gemm(const TensorView& d, const TensorView& a, const TensorView& b, const Options& options,
                      void* stream) {
  constexpr const char* kApi = "kiln::tune::gemm";
  KILN_RETURN_IF_ERROR(client::CheckTuneOptions(kApi, options));
  KILN_ASSIGN_OR_RETURN(const client::GemmPlan plan, client::PlanGemm(d, a, b, nullptr, nullptr, 1.0, kApi));
  return client::TuneGemm(plan, options, stream);
}

StatusOr<Report> fp8_gemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& a_scales,
                          const TensorView& b_scales, const Options& options, void* stream) {
  constexpr const char* kApi = "kiln::tune::fp8_gemm";
  KILN_RETURN_IF_ERROR(client::CheckTuneOptions(kApi, options));
  KILN_ASSIGN_OR_RETURN(const client::Fp8GemmPlan plan, client::PlanFp8Gemm(d, a, b, a_scales, b_scales, kApi));
  return client::TuneFp8Gemm(plan, options, stream);
}

StatusOr<Report> grouped_gemm(const TensorView& d, const TensorView& a, const TensorView& b, const TensorView& m_indptr,
                              const Options& options, void* stream) {
  constexpr const char* kApi = "kiln::tune::grouped_gemm";
  KILN_RETURN_IF_ERROR(client::CheckTuneOptions(kApi, options));
  KILN_ASSIGN_OR_RETURN(const GroupedGemmPlan plan, client::PlanGroupedGemm(d, a, b, m_indptr, kApi));
  return client::TuneGrouped(plan, kiln::gemm::kGroupedGemmOp, options, stream);
}

StatusOr<Report> grouped_gemm_masked(const TensorView& d, const TensorView& a, const TensorView& b,
                                     const TensorView& masked_m, const Options& options, void* stream) {
  constexpr const char* kApi = "kiln::tune::grouped_gemm_masked";
  KILN_RETURN_IF_ERROR(client::CheckTuneOptions(kApi, options));
  KILN_ASSIGN_OR_RETURN(const GroupedGemmPlan plan, client::PlanGroupedGemmMasked(d, a, b, masked_m, kApi));
  return client::TuneGrouped(plan, kiln::gemm::kGroupedGemmMaskedOp, options, stream);
}

StatusOr<Report> grouped_fp8_gemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                  const TensorView& a_scales, const TensorView& b_scales, const TensorView& m_indptr,
                                  const Options& options, void* stream) {
  constexpr const char* kApi = "kiln::tune::grouped_fp8_gemm";
  KILN_RETURN_IF_ERROR(client::CheckTuneOptions(kApi, options));
  KILN_ASSIGN_OR_RETURN(const GroupedGemmPlan plan,
                        client::PlanGroupedFp8Gemm(d, a, b, a_scales, b_scales, m_indptr, kApi));
  return client::TuneGrouped(plan, kiln::gemm::kGroupedFp8GemmOp, options, stream);
}

StatusOr<Report> grouped_fp8_gemm_masked(const TensorView& d, const TensorView& a, const TensorView& b,
                                         const TensorView& a_scales, const TensorView& b_scales,
                                         const TensorView& masked_m, const Options& options, void* stream) {
  constexpr const char* kApi = "kiln::tune::grouped_fp8_gemm_masked";
  KILN_RETURN_IF_ERROR(client::CheckTuneOptions(kApi, options));
  KILN_ASSIGN_OR_RETURN(const GroupedGemmPlan plan,
                        client::PlanGroupedFp8GemmMasked(d, a, b, a_scales, b_scales, masked_m, kApi));
  return client::TuneGrouped(plan, kiln::gemm::kGroupedFp8GemmMaskedOp, options, stream);
}

}  // namespace kiln::tune
