// The diagnostic controls of the gemm tactic, read from the environment once per process:
//
//   KILN_FORCE_TACTIC=gemm:t128x128x64s4g8   every gemm call of the process uses this tactic
//                                            (said once on stderr: it overrides the heuristic)
//   KILN_TACTIC_BLOCKLIST=/path/file         tactics never chosen by the heuristic, one a line:
//                                            "gemm t128x256x64s4g8" or, for some GPUs only,
//                                            "gemm t128x256x64s4g8 gpu=H200" (a substring of the
//                                            device name); '#' starts a comment
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

namespace kiln::client {

// "t128x256x64s4g8"
std::string GemmTacticText(const gemm::GemmTactic& tactic);
// INVALID_ARGUMENT naming `text` unless it is the text of a tactic of the space.
StatusOr<gemm::GemmTactic> ParseGemmTactic(std::string_view text);

struct BlockedGemmTactic {
  gemm::GemmTactic tactic{};
  std::string gpu;  // a substring of the device name; empty: every device
};

struct GemmTacticControls {
  std::optional<gemm::GemmTactic> forced;
  std::vector<BlockedGemmTactic> blocked;

  bool Blocks(const gemm::GemmTactic& tactic, std::string_view gpu_name) const;
};

// The controls from the variables' values (null: unset) and the blocklist file's text (read by
// the caller). INVALID_ARGUMENT naming the variable, the line and what is accepted.
StatusOr<GemmTacticControls> ParseGemmTacticControls(const char* force, const char* blocklist_path,
                                                     std::string_view blocklist_text);

// This process's controls: the variables read (and the file loaded) on first use; a bad value
// is the status of every gemm call of the process. The forced tactic is said once on stderr.
const StatusOr<GemmTacticControls>& GemmTacticControlsFromEnvironment();

}  // namespace kiln::client
