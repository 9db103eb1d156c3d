// KILN_GEMM_CLUSTER: the gemm family's kernels (gemm.cu, fp8_gemm.cu) run split-K in clusters
// of KILN_GEMM_SPLIT_K blocks along x, compiled into the kernel (__cluster_dims__), so a plain
// launch makes the clusters; no split, no cluster. Included after kiln_config.cuh, which
// defines KILN_GEMM_SPLIT_K (so not part of the family's precompiled-header prefix).
#pragma once

#ifndef KILN_GEMM_SPLIT_K
#error "include kiln_config.cuh (which defines KILN_GEMM_SPLIT_K) before kiln/gemm/split_k_cluster.cuh"
#endif

#if KILN_GEMM_SPLIT_K > 1
#define KILN_GEMM_CLUSTER __cluster_dims__(KILN_GEMM_SPLIT_K, 1, 1)
#else
#define KILN_GEMM_CLUSTER
#endif
