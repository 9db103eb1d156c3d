// kiln::tune: the autotuner. It times the candidate tactics of an op for one shape bucket on the
// caller's GPU and keeps the fastest correct one where every process of the node finds it: the
// file named by KILN_TUNING_FILE, else the daemon's tuning store (kilnd --tuning-store); with
// neither, the report is all there is. Later calls of the op whose shape falls in the bucket,
// on a GPU, driver, NVRTC, Kiln and tactic space equal to the ones measured, use the tuned
// tactic instead of the heuristic's (docs/kernels-gemm.md, "The autotuner").
//
// For every op with tactics: gemm, fp8_gemm and the four grouped ops. A bucket is (dtype,
// out_dtype, M rounded up to a power of two, N, K) — for the grouped ops also the number of
// groups, and M the rows a group has on average (contiguous: T / E) or at most (masked: M_max):
// the tuner measures at the caller's M (and, grouped, the caller's counts, which stay on the
// device), and the result serves every M of its bucket.
#ifndef KILN_TUNE_H_
#define KILN_TUNE_H_

#include <string>
#include <vector>

#include "kiln/export.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"

namespace kiln::tune {

struct Options {
  int warmup = 3;       // untimed calls of each candidate (the first compiles and loads it)
  int iterations = 20;  // timed calls of each candidate; the median is its time
  // A candidate whose median call takes longer fails ("exceeds the time limit"); one call that
  // does not finish within 10x this stops the tuning with DEADLINE_EXCEEDED (the GPU is stuck
  // in it: block that tactic, KILN_TACTIC_BLOCKLIST or kilnd --tactic-blocklist).
  double max_call_ms = 200;
  bool store = true;  // keep the result (KILN_TUNING_FILE or the daemon's store)
};

struct Candidate {
  std::string tactic;  // "t128x256x64s4g8" (the fp8 ops: "t128x256x128s4g8")
  bool ok = false;
  std::string failure;  // when not ok: compile, launch, wrong result (against the heuristic's), time limit
  double median_us = 0;
};

struct Report {
  std::string op;      // "gemm"
  std::string bucket;  // "bf16.obf16.m4096.n4096.k4096"; grouped: "bf16.obf16.e8.m1024.n28672.k4096"
  std::string chosen;  // the fastest correct candidate
  double chosen_us = 0;
  std::string heuristic;  // what the heuristic picks without tuning
  double heuristic_us = 0;
  std::string timing;  // "cuda_events_l2_flushed": CUDA events around each call, L2 flushed between
  std::vector<Candidate> candidates;
  double seconds = 0;     // the whole tuning, compiles included
  std::string stored_to;  // "KILN_TUNING_FILE /x", "the tuning store ... of kilnd at ...", or "nowhere: ..."
};

// Tunes kiln::ops::gemm for the bucket of d = a · bᵀ (arguments as kiln::ops::gemm takes them,
// without bias and c). d is overwritten many times; a and b must hold real data (the
// candidates' results are compared with the heuristic's). Synchronizes `stream`.
KILN_API StatusOr<Report> gemm(const TensorView& d, const TensorView& a, const TensorView& b,
                               const Options& options = {}, void* stream = nullptr);

// The same for the other ops with tactics, arguments as their kiln::ops functions take them
// (kiln/ops/gemm.h). a, b (and the scales, and the groups' counts) must hold real data.
KILN_API StatusOr<Report> fp8_gemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                   const TensorView& a_scales, const TensorView& b_scales, const Options& options = {},
                                   void* stream = nullptr);
KILN_API StatusOr<Report> grouped_gemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                       const TensorView& m_indptr, const Options& options = {}, void* stream = nullptr);
KILN_API StatusOr<Report> grouped_gemm_masked(const TensorView& d, const TensorView& a, const TensorView& b,
                                              const TensorView& masked_m, const Options& options = {},
                                              void* stream = nullptr);
KILN_API StatusOr<Report> grouped_fp8_gemm(const TensorView& d, const TensorView& a, const TensorView& b,
                                           const TensorView& a_scales, const TensorView& b_scales,
                                           const TensorView& m_indptr, const Options& options = {},
                                           void* stream = nullptr);
KILN_API StatusOr<Report> grouped_fp8_gemm_masked(const TensorView& d, const TensorView& a, const TensorView& b,
                                                  const TensorView& a_scales, const TensorView& b_scales,
                                                  const TensorView& masked_m, const Options& options = {},
                                                  void* stream = nullptr);

}  // namespace kiln::tune

#endif  // KILN_TUNE_H_
