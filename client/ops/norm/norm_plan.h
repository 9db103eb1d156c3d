// NormPlan: the arguments of rms_norm / fused_add_rms_norm, validated and turned into what the
// kernel takes (pointers, rows, row strides, eps as float) and the specialization it needs
// (dtype, hidden, vec). Pure: no driver call, so every check runs — and is tested — without
// a GPU.
#pragma once

#include <cstdint>

#include "kiln/norm/norm_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

enum class NormOp : uint8_t { kRmsNorm, kFusedAddRmsNorm };

struct NormPlan {
  NormOp op = NormOp::kRmsNorm;
  const char* api = "";  // the caller's name for messages: "kiln::ops::rms_norm", "kiln_rms_norm"
  DType dtype = DType::kFloat32;
  int device = 0;
  int64_t rows = 0;
  int64_t hidden = 0;
  int vec = 1;
  float eps = 0;
  // rms_norm:           a = out,   b = input,    a_stride = out rows,   b_stride = input rows
  // fused_add_rms_norm: a = input, b = residual, a_stride = input rows, b_stride = residual rows
  void* a = nullptr;
  void* b = nullptr;
  const void* weight = nullptr;
  int64_t a_stride = 0;
  int64_t b_stride = 0;
};

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
// `api` must outlive the plan (a string literal). A call with the layouts and eps of one this
// thread accepted recently reruns only the pointer checks (plan_memo.h); the answer is the same.
StatusOr<NormPlan> PlanRmsNorm(const TensorView& out, const TensorView& input, const TensorView& weight, double eps,
                               const char* api);
StatusOr<NormPlan> PlanFusedAddRmsNorm(const TensorView& input, const TensorView& residual, const TensorView& weight,
                                       double eps, const char* api);
// Either op with every check run, and nothing remembered (what the tests compare the memo
// with); `a`, `b` are the op's first two tensors in its argument order: (out, input) for
// rms_norm, (input, residual) for fused_add_rms_norm.
StatusOr<NormPlan> PlanNormFully(NormOp op, const TensorView& a, const TensorView& b, const TensorView& weight,
                                 double eps, const char* api);

}  // namespace kiln::client
