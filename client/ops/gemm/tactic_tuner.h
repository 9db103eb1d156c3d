// The autotuner's measuring loop, shared by every op with tactics (kiln/tune.h): an op's tuner
// (gemm_tuner.cpp) validates the call, names the op's bucket, the heuristic's tactic and the
// candidates, and gives a launch; this times them and stores the result.
//
// Per candidate (the blocklists apply first; tactics outside the op's space are dropped): d
// poisoned, warm-up calls (the first compiles and loads it), d compared with the heuristic
// tactic's result (a wrong result fails the candidate), then `iterations` calls each between
// two CUDA events on the caller's stream with the L2 flushed before each (a memset of twice its
// size, outside the events): the median is the candidate's time. Then the winner's neighbours:
// its other raster groups (1, 4, 16) and one stage fewer. CUDA events rather than
// %globaltimer: every candidate is a separate kernel launch of at least a few microseconds,
// which events resolve to ~0.5 us; the events are polled with a deadline so that a hung
// candidate stops the tuning with an error instead of blocking the process forever.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"
#include "kiln/tensor_view.h"
#include "kiln/tune.h"

namespace kiln::client {

struct TacticTuneJob {
  const char* api = "";  // "kiln::tune::gemm": the start of every message
  const char* op = "";   // gemm::kGemmOp, ...: the record's op and the blocklists' key
  std::string bucket;    // the shape bucket the result serves
  int device = 0;
  // d as every launch writes it: `rows` rows of `cols` elements, `row_stride` elements apart.
  // Elements no launch writes (a masked layout's padding rows) stay poisoned in every result.
  void* d = nullptr;
  DType out_dtype = DType::kBFloat16;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
  gemm::GemmTactic heuristic{};              // timed first; its result is what the others must match
  std::vector<gemm::GemmTactic> candidates;  // the others, in order (duplicates are dropped)
  std::function<Status(const gemm::GemmTactic& tactic, void* stream)> launch;
};

// INVALID_ARGUMENT "<api>: options: ..." unless warmup and iterations are at least 1 and
// max_call_ms positive (checked before anything touches a GPU).
Status CheckTuneOptions(const char* api, const tune::Options& options);

// Times the job's candidates and, unless options.store is false, stores the fastest correct one
// (KILN_TUNING_FILE or the daemon's store). INVALID_ARGUMENT for bad options; INTERNAL when no
// candidate ran correctly; DEADLINE_EXCEEDED when one hangs.
StatusOr<tune::Report> RunTacticTuning(const TacticTuneJob& job, const tune::Options& options, void* stream);

// The candidates of an op without a shape model of its own (fp8_gemm, the grouped ops): every
// tile of the op's space at its most stages with raster groups of 8, largest tiles first.
std::vector<gemm::GemmTactic> SpaceTuneCandidates(std::string_view op);

}  // namespace kiln::client
