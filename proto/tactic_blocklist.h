// Tactic blocklist files: tactics known to hang or fail on a stack, one a line,
//
//   # comment
//   gemm t128x256x64s4g8                       every GPU
//   gemm t128x256x64s4g8 gpu=H200              GPUs whose name contains "H200"
//   gemm t64x64x64s8g8 gpu=NVIDIA H100 driver=12080 nvrtc=12.8
//
// op, tactic, then optional environment matches: gpu=<a part of the GPU name> (may hold
// spaces: it runs to the next match or the end of the line), driver=<cuDriverGetVersion, e.g.
// 13000>, nvrtc=<the daemon's NVRTC, e.g. 13.0>. An entry applies where all its matches do.
//
// The one parser of the format for kilnd --tactic-blocklist and the client's
// KILN_TACTIC_BLOCKLIST. It lives beside the wire types because its entries are wire types
// (kiln.v1.BlockedTactic, served by ListBlockedTactics) and because proto/ is the one folder
// both the daemon and every client component may include (cmake/CheckIncludes.cmake): the
// daemon must not depend on client/, and kernels/include/kiln/<family>/ holds device-valid
// contracts, not file parsers.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/v1/tuning.pb.h"

namespace kiln::proto {

// An op's own check of a tactic's text: "" when `tactic` is a tactic of `op`'s space, else why
// not (e.g. the gemm client's ParseGemmTactic message). Without one, only the form is checked
// (proto/tuning_checks.h TacticTextProblem).
using TacticCheck = std::function<std::string(std::string_view op, std::string_view tactic)>;

struct ParsedBlocklist {
  std::vector<v1::BlockedTactic> entries;  // in file order; source "<path>:<line>"
  std::string error;                       // empty: every line was good
};

// Parses a blocklist's `text`. The first bad line stops it: error is
// "<label> <path>:<line>: '<line>': <what is wrong>; expected '<the form>'" (label names the
// flag or variable: "--tactic-blocklist", "KILN_TACTIC_BLOCKLIST").
ParsedBlocklist ParseTacticBlocklist(std::string_view text, std::string_view label, std::string_view path,
                                     const TacticCheck& check = nullptr);

// Reads and parses the file at `path`; an unreadable file is an error naming it and errno's
// text.
ParsedBlocklist ReadTacticBlocklist(std::string_view label, const std::string& path,
                                    const TacticCheck& check = nullptr);

// Whether `entry`'s environment matches hold `here` (gpu: a part of here.gpu_name; driver and
// nvrtc: equal).
bool BlockedTacticApplies(const v1::BlockedTactic& entry, const v1::TuningEnvironment& here);

// Whether any entry blocks `tactic` of `op` here.
bool IsTacticBlocked(const std::vector<v1::BlockedTactic>& entries, std::string_view op, std::string_view tactic,
                     const v1::TuningEnvironment& here);

}  // namespace kiln::proto
