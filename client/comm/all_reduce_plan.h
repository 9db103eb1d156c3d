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

inline constexpr int64_t kMaxAddRmsNormHidden = 16384;

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
StatusOr<AddRmsNormPlan> PlanAddRmsNorm(const TensorView& out, const TensorView& in,
                                        const TensorView& residual, const TensorView& weight,
                                        double eps);

// The widest vector (elements; vec * element_size <= 16 bytes) every address is aligned to.
int AlignedVec(size_t element_size, std::initializer_list<uintptr_t> addresses);

// Auto's resolution, and a forced choice passed through (kOneShot / kTwoShot).
::kiln::comm::AllReduceAlgorithm ResolveAlgorithm(::kiln::comm::AllReduceAlgorithm requested,
                                                  size_t bytes, int world_size);

// The grid of one all-reduce launch, as the generator prescribes it
// (kernels/ops/comm/all_reduce_generator.h, AllReduceGrid): one thread per vector a rank
// reduces (one-shot: all n / vec; two-shot: its chunk, ceil(n / vec / world)), in blocks of
// `block`, clamped to 1..max_blocks. Every rank computes the same grid: the kernels'
// per-block barriers pair block b of every rank.
unsigned AllReduceGrid(int64_t n, int vec, int world, bool two_shot, unsigned block,
                       unsigned max_blocks);

}  // namespace kiln::client::comm
