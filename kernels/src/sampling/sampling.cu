// The compilation unit of the sampling family (ops top_k_sampling, top_p_sampling,
// top_k_top_p_sampling, min_p_sampling, argmax). kiln_config.cuh, rendered per specialization
// by kernels/ops/sampling/sampling_generator.cpp, chooses the op, the samples' dtype and the
// vector width. Contract: kiln/sampling/sampling.cuh, docs/kernels-sampling.md.
#include "kiln/common/grid_dependency.cuh"
#include "kiln/sampling/sampling.cuh"

// The declaration below ends the precompiled-header prefix (the leading block of
// directives), so every specialization shares one PCH of the headers above, and the
// per-specialization kiln_config.cuh stays out of it: NVRTC 13.0 does not compare in-memory
// header contents before it reuses a PCH (see server/jit/pch_key.h).
namespace kiln_sampling_unit {}

#include "kiln_config.cuh"

#if !defined(KILN_SAMPLING_OP) || !defined(KILN_SAMPLING_ENTRY) || !defined(KILN_SAMPLING_OUT) ||          \
    !defined(KILN_SAMPLING_VEC) || !defined(KILN_SAMPLING_THREADS) || !defined(KILN_SAMPLING_USES_LIST) || \
    !defined(KILN_SAMPLING_CLUSTER)
#error "kiln_config.cuh must define every KILN_SAMPLING_* parameter (see sampling_generator.cpp)"
#endif

using Shape =
    kiln::sampling::SamplingShape<KILN_SAMPLING_OUT, KILN_SAMPLING_VEC, KILN_SAMPLING_THREADS, KILN_SAMPLING_CLUSTER>;

// Launch (kiln/sampling/sampling_contract.h): grid.x = rows * KILN_SAMPLING_CLUSTER (a block,
// or a cluster of KILN_SAMPLING_CLUSTER blocks along x, per row), block.x =
// KILN_SAMPLING_THREADS, dynamic shared memory as the launch hint says: sizeof(SelectSmem) =
// 96 KiB (sizeof(ClusterSelectSmem) = 112 KiB in a cluster) when KILN_SAMPLING_USES_LIST, else
// none.
extern "C" __global__ void __launch_bounds__(KILN_SAMPLING_THREADS, 1)
    KILN_SAMPLING_ENTRY(const kiln::sampling::SamplingParams p) {
  kiln::GridDependencyBegin();
  __shared__ kiln::sampling::BlockScratch<KILN_SAMPLING_THREADS> scratch;
  kiln::sampling::SelectSmem* smem = nullptr;
  unsigned long long* hist_part = nullptr;
#if KILN_SAMPLING_USES_LIST
  extern __shared__ __align__(16) unsigned char kiln_sampling_dynamic_smem[];
#if KILN_SAMPLING_CLUSTER > 1
  auto* cluster_smem = reinterpret_cast<kiln::sampling::ClusterSelectSmem*>(kiln_sampling_dynamic_smem);
  smem = &cluster_smem->select;
  hist_part = cluster_smem->hist_part;
#else
  smem = reinterpret_cast<kiln::sampling::SelectSmem*>(kiln_sampling_dynamic_smem);
#endif
#endif
  kiln::sampling::SampleRow<Shape, kiln::sampling::SamplingOp::KILN_SAMPLING_OP>(p.samples, p.probs, p.vocab,
                                                                                 p.row_stride, p.k_values, p.k_scalar,
                                                                                 p.p_values, p.p_scalar, p.seed,
                                                                                 p.offset, smem, scratch, hist_part);
}
