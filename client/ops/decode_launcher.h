// RunBatchDecode and RunAppendPagedKv: a validated call (client/ops/decode_call.h) → the
// kernel specializations in the caller's context → launches on the caller's stream. The first
// call of a specialization in a context asks the daemon and loads; every later one is a cache
// lookup and cuLaunchKernelEx (two for a split batch_decode: attention, then merge).
#pragma once

#include "client/ops/decode_call.h"
#include "kiln/status.h"

namespace kiln::client {

// OpLaunchKey::op numbers of the decode family (40-49).
enum class DecodeOp : uint16_t { kBatchDecode = 40, kBatchDecodeMerge = 41, kAppendPagedKv = 42 };

Status RunBatchDecode(const BatchDecodeCall& call, void* stream);
Status RunAppendPagedKv(const AppendPagedKvCall& call, void* stream);

}  // namespace kiln::client
