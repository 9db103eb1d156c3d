// The diagnostic controls of the gemm family's tactics, read from the environment once per
// process, for every op with tactics (kTacticOps: gemm, the grouped ops, the fp8 ops):
//
//   KILN_FORCE_TACTIC=gemm:t128x128x64s4g8   every call of that op in the process uses this
//                                            tactic (said once on stderr: it overrides the
//                                            heuristic); several ops: comma-separated,
//                                            gemm:t128x128x64s4g8,fp8_gemm:t128x256x128s4g8
//   KILN_TACTIC_BLOCKLIST=/path/file         tactics never chosen (nor tuned), one a line:
//                                            "gemm t128x256x64s4g8" or, on some stacks only,
//                                            "gemm t128x256x64s4g8 gpu=H200 driver=13000
//                                            nvrtc=13.0" (each match optional; gpu= a part of
//                                            the device name); '#' starts a comment. The format
//                                            of kilnd --tactic-blocklist (proto/tactic_blocklist.h)
//
// A tactic is written as in the URI: t<tile_m>x<tile_n>x<K per stage>s<stages>g<group_m> (K 64
// for bf16/fp16 ops, 128 for the fp8 ops), and k<split_k> after it when K is split (gemm and
// fp8_gemm: t64x256x64s4g8k8, t64x256x128s4g8k4), m<multicast> when clusters share B (gemm:
// t128x256x64s4g8m2). Parsing and the choice are pure (tested without
// a GPU); the launch reads the controls through GemmTacticControlsFromEnvironment(). docs/diagnostic-controls.md,
// docs/kernels-gemm.md.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"
#include "kiln/v1/tuning.pb.h"

namespace kiln::client {

// The ops with tactics, and whether `tactic` is in `op`'s space (gemm's, and fp8_gemm's the same;
// the grouped ops' without split) — false for an op without tactics.
inline constexpr const char* kTacticOps[] = {gemm::kGemmOp,    gemm::kGroupedGemmOp,    gemm::kGroupedGemmMaskedOp,
                                             gemm::kFp8GemmOp, gemm::kGroupedFp8GemmOp, gemm::kGroupedFp8GemmMaskedOp};
bool TacticInSpace(std::string_view op, const gemm::GemmTactic& tactic);

// "t128x256x64s4g8" (fp8 ops: "t128x256x128s4g8")
std::string GemmTacticText(const gemm::GemmTactic& tactic, std::string_view op = gemm::kGemmOp);
// INVALID_ARGUMENT naming `text` unless it is the text of a tactic of `op`'s space.
StatusOr<gemm::GemmTactic> ParseGemmTactic(std::string_view text, std::string_view op = gemm::kGemmOp);

struct BlockedGemmTactic {
  gemm::GemmTactic tactic{};
  v1::BlockedTactic entry;  // the line: op, tactic, its gpu/driver/nvrtc matches, file:line
};

struct GemmTacticControls {
  std::vector<std::pair<std::string, gemm::GemmTactic>> forced;  // (op, tactic), at most one an op
  std::vector<BlockedGemmTactic> blocked;

  // KILN_FORCE_TACTIC's tactic for `op`, or null.
  const gemm::GemmTactic* Forced(std::string_view op) const;
  // Whether an entry blocks `tactic` of `op` on the device named `gpu_name` in environment
  // `here` (null: not known; then entries that match a driver or an NVRTC do not apply).
  bool Blocks(std::string_view op, const gemm::GemmTactic& tactic, std::string_view gpu_name,
              const v1::TuningEnvironment* here = nullptr) const;
};

// The controls from the variables' values (null: unset) and the blocklist file's text (read by
// the caller). INVALID_ARGUMENT naming the variable, the line and what is accepted.
StatusOr<GemmTacticControls> ParseGemmTacticControls(const char* force, const char* blocklist_path,
                                                     std::string_view blocklist_text);

// This process's controls: the variables read (and the file loaded) on first use; a bad value
// is the status of every call of an op with tactics in the process. The forced tactics are said
// once on stderr.
const StatusOr<GemmTacticControls>& GemmTacticControlsFromEnvironment();

}  // namespace kiln::client
