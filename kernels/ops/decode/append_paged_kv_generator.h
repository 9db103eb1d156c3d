// The decode family's cache-write generator (op "append_paged_kv"): params → JitSpec, and the
// launch rule shared with the device code (kiln/decode/append_paged_kv.cuh).
#pragma once

#include <memory>

#include "kernels/jit/op_generator.h"

namespace kiln::kernels {

// A grid-stride copy: one thread per vector of `vec` elements of one (token, kv head), in
// blocks of kAppendPagedKvBlock threads, at most kAppendPagedKvMaxBlocks blocks.
inline constexpr int kAppendPagedKvBlock = 256;
inline constexpr int kAppendPagedKvMaxBlocks = 8192;

std::unique_ptr<OpGenerator> MakeAppendPagedKvGenerator();  // "append_paged_kv"

}  // namespace kiln::kernels
