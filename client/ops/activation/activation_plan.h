// ActivationPlan: the arguments of silu_and_mul / gelu_and_mul / gelu_tanh_and_mul, validated
// and turned into what the kernel takes (pointers, rows, d, row strides) and the
// specialization it needs (dtype, vec). Pure: no driver call, so every check runs — and is
// tested — without a GPU.
#pragma once

#include <cstdint>

#include "kiln/activation/activation_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client {

enum class ActivationOp : uint8_t { kSiluAndMul, kGeluAndMul, kGeluTanhAndMul };

struct ActivationPlan {
  ActivationOp op = ActivationOp::kSiluAndMul;
  const char* api = "";  // the caller's name for messages: "kiln::ops::silu_and_mul", "kiln_silu_and_mul"
  DType dtype = DType::kBFloat16;
  int device = 0;
  int64_t rows = 0;
  int64_t d = 0;  // out's last dim; input's is 2d
  int vec = 1;
  void* out = nullptr;
  const void* input = nullptr;
  int64_t out_stride = 0;  // elements between rows
  int64_t in_stride = 0;
};

// INVALID_ARGUMENT "<api>: <argument>: <expected>, found <found>" on the first problem.
// `api` must outlive the plan (a string literal). A call with the layouts of one this thread
// accepted recently reruns only the pointer checks (plan_memo.h); the answer is the same.
StatusOr<ActivationPlan> PlanActAndMul(ActivationOp op, const TensorView& out, const TensorView& input,
                                       const char* api);
// The same with every check run, and nothing remembered: what the tests compare the memo with.
StatusOr<ActivationPlan> PlanActAndMulFully(ActivationOp op, const TensorView& out, const TensorView& input,
                                            const char* api);

}  // namespace kiln::client
