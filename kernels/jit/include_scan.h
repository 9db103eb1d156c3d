// The include rules of raw sources: every way a unit can make the compiler read a file
// (#include, #include_next, #import, #embed, __has_include(_next), the pragmas that read
// files, also through _Pragma), each checked against what a raw source may read.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "kernels/jit/kernel_tree.h"

namespace kiln::kernels {

// OK when every include of `code` is a literal "path" or <path> naming a file of the tree's
// include/ folder or an existing file under `cuda_include_dir` (or its cccl/ folder),
// relative and without ".."; INVALID_ARGUMENT "raw source '<source>': <unit>:<line>: <what>
// <why>; allowed: ..." for the first violation. Comments, string literals and raw strings
// are skipped; a directive after a multi-line comment is still checked (stricter than C).
absl::Status CheckRawSourceIncludes(std::string_view source_name, std::string_view unit_name, std::string_view code,
                                    const TreeSnapshot& tree, const std::string& cuda_include_dir);

}  // namespace kiln::kernels
