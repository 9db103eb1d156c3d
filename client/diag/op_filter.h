// Which ops the costly diagnostics apply to: KILN_DUMP_INCLUDE and KILN_DUMP_EXCLUDE hold
// comma-separated fnmatch globs, matched against both names of a call (the short op name,
// "rms_norm", and the entry point, "kiln::ops::rms_norm" or "kiln_rms_norm"). An op is
// selected when the include list is empty or one pattern matches, and no exclude pattern
// matches. The selection gates level-5 statistics and level-10 dumps; names are always logged.
#pragma once

#include <string>
#include <vector>

namespace kiln::client::diag {

bool OpSelected(const std::vector<std::string>& include, const std::vector<std::string>& exclude, const std::string& op,
                const std::string& api);

}  // namespace kiln::client::diag
