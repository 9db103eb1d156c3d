// The diagnostic controls of the gemm tactic, read from the environment once per process:
//
//   KILN_FORCE_TACTIC=gemm:t128x128x64s4g8   every gemm call of the process uses this tactic
//                                            (said once on stderr: it overrides the heuristic)
//   KILN_TACTIC_BLOCKLIST=/path/file         tactics never chosen (nor tuned), one a line:
//                                            "gemm t128x256x64s4g8" or, on some stacks only,
//                                            "gemm t128x256x64s4g8 gpu=H200 driver=13000
//                                            nvrtc=13.0" (each match optional; gpu= a part of
//                                            the device name); '#' starts a comment. The format
//                                            of kilnd --tactic-blocklist (proto/tactic_blocklist.h)
//
// A tactic is written as in the URI: t<tile_m>x<tile_n>x64s<stages>g<group_m>, and k<split_k>
// after it when K is split (t64x256x64s4g8k8). Parsing and the choice are pure (tested without
// a GPU); the launch reads the controls through GemmTacticControlsFromEnvironment(). docs/diagnostic-controls.md,
// docs/kernels-gemm.md.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/gemm/gemm_contract.h"
#include "kiln/status.h"
#include "kiln/v1/tuning.pb.h"

namespace kiln::client {

// "t128x256x64s4g8"
std::string GemmTacticText(const gemm::GemmTactic& tactic);
// INVALID_ARGUMENT naming `text` unless it is the text of a tactic of the space.
StatusOr<gemm::GemmTactic> ParseGemmTactic(std::string_view text);

struct BlockedGemmTactic {
  gemm::GemmTactic tactic{};
  v1::BlockedTactic entry;  // the line: op, tactic, its gpu/driver/nvrtc matches, file:line
};

struct GemmTacticControls {
  std::optional<gemm::GemmTactic> forced;
  std::vector<BlockedGemmTactic> blocked;

  // Whether an entry blocks `tactic` on the device named `gpu_name` in environment `here`
  // (null: not known; then entries that match a driver or an NVRTC do not apply).
  bool Blocks(const gemm::GemmTactic& tactic, std::string_view gpu_name,
              const v1::TuningEnvironment* here = nullptr) const;
};

// The controls from the variables' values (null: unset) and the blocklist file's text (read by
// the caller). INVALID_ARGUMENT naming the variable, the line and what is accepted.
StatusOr<GemmTacticControls> ParseGemmTacticControls(const char* force, const char* blocklist_path,
                                                     std::string_view blocklist_text);

// This process's controls: the variables read (and the file loaded) on first use; a bad value
// is the status of every gemm call of the process. The forced tactic is said once on stderr.
const StatusOr<GemmTacticControls>& GemmTacticControlsFromEnvironment();

}  // namespace kiln::client
