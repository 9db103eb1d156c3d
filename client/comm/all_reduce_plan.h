// The arguments of Communicator::AllReduce / AllReduceAddRmsNorm checked and turned into what
// the kernels take, and the launch choices every rank must make alike (algorithm, vector
// width, grid). Pure: no driver call, so every check is tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/comm.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::client::comm {

struct AllReducePlan {
  DType dtype = DType::kFloat32;
  size_t element_size = 4;
  int device = 0;
  int64_t n = 0;  // elements
  const void* in = nullptr;
  void* out = nullptr;
};

struct AddRmsNormPlan {
  DType dtype = DType::kFloat32;
  size_t element_size = 4;
  int device = 0;
  int64_t rows = 0;
  int64_t hidden = 0;
  float eps = 0;
  const void* in = nullptr;
  void* residual = nullptr;
  const void* weight = nullptr;
  void* out = nullptr;
};

// INVALID_ARGUMENT "<argument>: <expected>, found <found>" for the first problem.
StatusOr<AllReducePlan> PlanAllReduce(const TensorView& out, const TensorView& in);
StatusOr<AddRmsNormPlan> PlanAddRmsNorm(const TensorView& out, const TensorView& in, const TensorView& residual,
                                        const TensorView& weight, double eps);

// The widest vector (elements; vec * element_size <= 16 bytes) every address is aligned to.
int AlignedVec(size_t element_size, std::initializer_list<uintptr_t> addresses);

// Auto's resolution, and a forced choice passed through (kOneShot / kTwoShot).
::kiln::comm::AllReduceAlgorithm ResolveAlgorithm(::kiln::comm::AllReduceAlgorithm requested, size_t bytes,
                                                  int world_size);

}  // namespace kiln::client::comm
