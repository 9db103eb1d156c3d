// RunSampling: a validated SamplingPlan → the right kernel specialization in the caller's
// context → one launch on the caller's stream (one block per row). The first call of an
// (op, samples dtype, vec, context) asks the daemon and loads; every later one is a cache
// lookup and cuLaunchKernelEx. SampleWithApi is the whole call (trace, plan, run) that the C++
// ops and the C ABI share.
#pragma once

#include "client/ops/sampling_plan.h"
#include "kiln/status.h"

namespace kiln::client {

Status RunSampling(const SamplingPlan& plan, void* stream);

// Traces the call (KILN_LOGLEVEL, client/diag/call_trace.h), plans it and runs it; messages
// start with `api`.
Status SampleWithApi(SamplingOp op, const SamplingArgs& args, const char* api, void* stream);

}  // namespace kiln::client
