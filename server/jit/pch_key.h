// PchKey: which per-process PCH sub-folder a compile may use, so that NVRTC's automatic PCH
// never hands one compile another's headers.
//
// Why: NVRTC 13.0 (-pch) checks the options and the unit's leading preprocessing directives
// before it reuses a PCH file, but not the contents of in-memory headers. A PCH made while
// kiln_config.cuh said "hidden 4096" was silently reused for "hidden 2048" and produced the
// 4096 kernel (reproduced in tests/server/jit/nvrtc_compiler_test.cpp). So the folder name
// is a digest of every in-memory header the PCH can contain: the kernels tree (its digest)
// and each spec header that the unit's directive prefix can reach. Headers included only
// after the prefix (rmsnorm.cu includes kiln_config.cuh after a declaration) stay out of
// the key, so all specializations of a family share one PCH.
#pragma once

#include <string>
#include <string_view>

#include "kernels/jit/jit_spec.h"
#include "kernels/jit/kernel_tree.h"

namespace kiln::server {

// The leading block of a unit that a PCH can cover: blank lines, comments and preprocessing
// directives, up to the first line with anything else.
std::string_view DirectivePrefix(std::string_view unit);

// 16 hex digits naming the PCH folder for compiling `unit` of `spec` against `tree`.
// Conservative: a spec header goes into the key when its name appears in the unit's
// directive prefix (outside comments), in any include/ file of the tree (comments included),
// or in another spec header in the key;
// all of them when the prefix holds an #include that is not a literal name.
std::string PchKey(const kernels::SourceFile& unit, const kernels::JitSpec& spec, const kernels::TreeSnapshot* tree);

}  // namespace kiln::server
