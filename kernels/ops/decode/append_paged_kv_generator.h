// append_paged_kv's launch shape (its generator registers itself in
// append_paged_kv_generator.cpp; contract: kiln/decode/decode_contract.h).
#pragma once

namespace kiln::kernels {

// A grid-stride copy: one thread per vector of `vec` elements of one (token, kv head), in
// blocks of kAppendPagedKvBlock threads, at most kAppendPagedKvMaxBlocks blocks.
inline constexpr int kAppendPagedKvBlock = 256;
inline constexpr int kAppendPagedKvMaxBlocks = 8192;

}  // namespace kiln::kernels
