// KILN_GEMM_CLUSTER: the gemm family's kernels (gemm.cu, fp8_gemm.cu) run split-K in clusters
// of KILN_GEMM_SPLIT_K blocks along x, and multicast in clusters of KILN_GEMM_MULTICAST (which
// the config defines only above 1, GemmTacticDefines: 1 here otherwise, so the configs without it
// stay as they were), compiled into the kernel (__cluster_dims__), so a plain launch makes the
// clusters; neither, no cluster. Included after the unit's rendered config, which
// defines KILN_GEMM_SPLIT_K (so not part of the family's precompiled-header prefix).
// NOTE: no header under include/ may name the rendered config's file: server/jit/pch_key.h
// then keys every family's PCH by it, and no two specializations share a PCH any more.
#pragma once

#ifndef KILN_GEMM_SPLIT_K
#error "include the unit's rendered config (it defines KILN_GEMM_SPLIT_K) before kiln/gemm/split_k_cluster.cuh"
#endif
#ifndef KILN_GEMM_MULTICAST
#define KILN_GEMM_MULTICAST 1
#endif

#if KILN_GEMM_SPLIT_K > 1
#define KILN_GEMM_CLUSTER __cluster_dims__(KILN_GEMM_SPLIT_K, 1, 1)
#elif KILN_GEMM_MULTICAST > 1
#define KILN_GEMM_CLUSTER __cluster_dims__(KILN_GEMM_MULTICAST, 1, 1)
#else
#define KILN_GEMM_CLUSTER
#endif
