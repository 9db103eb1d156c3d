#include "client/ops/sampling/sampling_plan.h"

#include <atomic>
#include <cmath>
#include <string>

#include "client/core/api/auto_number_control.h"
#include "client/core/api/invalid_argument.h"
#include "client/core/api/message_text.h"
#include "client/ops/row_view.h"
#include "client/ops/vec_width.h"

namespace kiln::client {
namespace {

bool UsesK(SamplingOp op) { return op == SamplingOp::kTopK || op == SamplingOp::kTopKTopP; }
bool UsesP(SamplingOp op) { return op == SamplingOp::kTopP || op == SamplingOp::kTopKTopP || op == SamplingOp::kMinP; }
const char* PName(SamplingOp op) { return op == SamplingOp::kMinP ? "min_p" : "top_p"; }

// A per-row parameter tensor: [rows] of `dtype`, contiguous, on probs' device.
StatusOr<RowView> PerRowTensor(const TensorView& t, const char* name, DType dtype, int64_t rows,
                               const TensorView& probs) {
  if (t.ndim != 1)
    return InvalidArgument(std::string(name) + ": expected a 1-D tensor [B] = [" + std::to_string(rows) +
                           "], found rank " + std::to_string(t.ndim) +
                           (t.ndim >= 1 && t.ndim <= kMaxTensorDims ? " " + ShapeText(t) : ""));
  if (t.dtype != dtype)
    return InvalidArgument(std::string(name) + ": expected dtype " + DTypeName(dtype) + ", found " +
                           DTypeName(t.dtype));
  if (t.shape[0] != rows)
    return InvalidArgument(std::string(name) + ": expected shape [" + std::to_string(rows) + "] (probs' rows), found " +
                           ShapeText(t));
  KILN_ASSIGN_OR_RETURN(auto v, ViewAsRows(t, name));
  KILN_RETURN_IF_ERROR(CheckSameDevice(t, name, probs.device, "probs"));
  return v;
}

StatusOr<SamplingPlan> Plan(SamplingOp op, const SamplingArgs& a) {
  if (a.samples == nullptr || a.probs == nullptr)
    return Status(StatusCode::kInternal, "PlanSampling: samples and probs must be given");
  const TensorView& probs_t = *a.probs;
  const TensorView& samples_t = *a.samples;

  if (probs_t.ndim != 2)
    return InvalidArgument("probs: expected a 2-D tensor [B, V], found rank " + std::to_string(probs_t.ndim) +
                           (probs_t.ndim >= 1 && probs_t.ndim <= kMaxTensorDims ? " " + ShapeText(probs_t) : ""));
  if (probs_t.dtype != DType::kFloat32)
    return InvalidArgument(std::string("probs: expected dtype fp32, found ") + DTypeName(probs_t.dtype));
  KILN_ASSIGN_OR_RETURN(auto probs, ViewAsRows(probs_t, "probs"));
  if (probs.hidden < 1 || probs.hidden > int64_t{sampling::kMaxVocab})
    return InvalidArgument("probs: the vocabulary size (dim 1) must be 1 to " +
                           std::to_string(int64_t{sampling::kMaxVocab}) + ", found " + std::to_string(probs.hidden) +
                           " in shape " + ShapeText(probs_t));
  const int64_t rows = probs.rows;

  if (samples_t.ndim != 1)
    return InvalidArgument("samples: expected a 1-D tensor [B] = [" + std::to_string(rows) + "], found rank " +
                           std::to_string(samples_t.ndim) +
                           (samples_t.ndim >= 1 && samples_t.ndim <= kMaxTensorDims ? " " + ShapeText(samples_t) : ""));
  if (samples_t.dtype != DType::kInt32 && samples_t.dtype != DType::kInt64)
    return InvalidArgument(std::string("samples: expected dtype int32 or int64, found ") + DTypeName(samples_t.dtype));
  if (samples_t.shape[0] != rows)
    return InvalidArgument("samples: expected shape [" + std::to_string(rows) + "] (probs' rows), found " +
                           ShapeText(samples_t));
  KILN_ASSIGN_OR_RETURN(auto samples, ViewAsRows(samples_t, "samples"));
  KILN_RETURN_IF_ERROR(CheckSameDevice(samples_t, "samples", probs_t.device, "probs"));
  KILN_RETURN_IF_ERROR(CheckNoOverlap(samples, probs, false));

  SamplingPlan plan;
  plan.op = op;
  plan.out_dtype = samples_t.dtype;
  plan.device = probs_t.device.index;
  plan.rows = rows;
  plan.vocab = probs.hidden;
  plan.row_stride = probs.row_stride;
  plan.samples = samples.data;
  plan.probs = reinterpret_cast<const float*>(probs.data);
  plan.seed = a.seed;
  plan.offset = a.offset;

  if (UsesK(op)) {
    if (a.k_values != nullptr) {
      KILN_ASSIGN_OR_RETURN(auto k, PerRowTensor(*a.k_values, "top_k", DType::kInt32, rows, probs_t));
      KILN_RETURN_IF_ERROR(CheckNoOverlap(samples, k, false));
      plan.k_values = reinterpret_cast<const int32_t*>(k.data);
    } else if (a.k_scalar < 0) {
      return InvalidArgument("top_k: expected k >= 0 (0: no top-k), found " + std::to_string(a.k_scalar));
    }
    plan.k_scalar = a.k_scalar;
  }
  if (UsesP(op)) {
    const char* name = PName(op);
    if (a.p_values != nullptr) {
      KILN_ASSIGN_OR_RETURN(auto p, PerRowTensor(*a.p_values, name, DType::kFloat32, rows, probs_t));
      KILN_RETURN_IF_ERROR(CheckNoOverlap(samples, p, false));
      plan.p_values = reinterpret_cast<const float*>(p.data);
    } else if (op == SamplingOp::kMinP) {
      if (!(a.p_scalar >= 0.0 && a.p_scalar <= 1.0))
        return InvalidArgument("min_p: expected a value in [0, 1], found " + NumberText(a.p_scalar));
    } else if (!(a.p_scalar > 0.0 && a.p_scalar <= 1.0)) {
      return InvalidArgument("top_p: expected a value in (0, 1], found " + NumberText(a.p_scalar));
    }
    plan.p_scalar = a.p_scalar;
  }

  if (rows > 0) plan.vec = ChooseVecWidth(sizeof(float), plan.vocab, {plan.row_stride}, {probs.data});
  return plan;
}

}  // namespace

StatusOr<SamplingPlan> PlanSampling(SamplingOp op, const SamplingArgs& args, const char* api) {
  auto plan = Plan(op, args);
  if (!plan.ok()) return plan.status().WithContext(api);
  plan->api = api;
  return plan;
}

int ChooseSamplingCluster(int64_t rows, int cc_major, int multiprocessors, int forced) {
  if (cc_major < 9) return 1;                                      // clusters are sm_90+
  if (forced > 0) return rows * forced <= INT32_MAX ? forced : 1;  // grid.x is rows * cluster
  // Measured on the H200 (132 SMs; bench/results/2026-12-04-sampling-h200.md): clusters of 2
  // run on every SM at once, clusters of 4 and 8 on about half (a batch that needs more runs a
  // second wave: twice the time), and 8 blocks per row are no faster than 4 at batch 1.
  if (rows * 4 * 2 <= multiprocessors) return 4;
  if (rows * 2 <= multiprocessors) return 2;
  return 1;
}

namespace {
std::atomic<int> forced_cluster{-1};
}  // namespace

void SetSamplingClusterForTesting(int forced) { forced_cluster.store(forced, std::memory_order_relaxed); }

int SamplingClusterFromEnvironment() {
  const int forced = forced_cluster.load(std::memory_order_relaxed);
  if (forced >= 0) return forced;
  static const int value = static_cast<int>(
      AutoNumberFromEnvironment({"KILN_SAMPLING_CLUSTER", 1, 8, "auto, 1, 2, 4 or 8", true}));
  return value;
}

}  // namespace kiln::client
