// The environment of a tuning result (kiln.v1.TuningEnvironment): its key in a store, and
// which fields keep a stored result from being reused here. Shared by the daemon's store and
// the client's, so both say the same thing about the same mismatch.
#pragma once

#include <string>
#include <vector>

#include "kiln/v1/tuning.pb.h"

namespace kiln::proto {

// The trailing metadata of a NOT_FOUND LookupTuning that carries DescribeTuningMismatch's text
// for the client's log (binary, "-bin": a GPU name need not be ASCII).
inline constexpr const char* kTuningMismatchMetadata = "kiln-tuning-mismatch-bin";

// A canonical, readable key of every field ("gpu_name=11:NVIDIA H200;sm_count=132;..."):
// equal keys mean equal environments. Lengths are written before the text fields, so no value
// can imitate a field boundary.
std::string TuningEnvironmentKey(const v1::TuningEnvironment& environment);

// The fields that differ, each "gpu_name: stored 'NVIDIA H100', here 'NVIDIA H200'", in field
// order; empty when the environments are equal.
std::vector<std::string> TuningEnvironmentDifferences(const v1::TuningEnvironment& stored,
                                                      const v1::TuningEnvironment& here);

// One line for the loader log and NOT_FOUND messages: why none of `stored` (records of one op
// and bucket) is reused here, "recorded under another environment: <differences>; ..." (at
// most three records described, then how many more).
std::string DescribeTuningMismatch(const std::vector<v1::TuningEnvironment>& stored, const v1::TuningEnvironment& here);

}  // namespace kiln::proto
