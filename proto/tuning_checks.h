// What a tuning record and its parts must look like before a store keeps them: the one set of
// checks the daemon (INVALID_ARGUMENT at its RPCs) and the client (KILN_TUNING_FILE, and before
// it sends a record) apply. Each returns "" when the value is fine, else a message naming the
// field, the value and what is allowed.
#pragma once

#include <string>
#include <string_view>

#include "kiln/v1/tuning.pb.h"

namespace google::protobuf {
class Message;
}

namespace kiln::proto {

// An op name: 1 to 64 of [a-z0-9_], starting with a letter ("gemm").
std::string OpNameProblem(std::string_view field, std::string_view op);
// A bucket key: 1 to 256 of [A-Za-z0-9._:=,+-] (no spaces: it is one word in logs and lines).
std::string BucketProblem(std::string_view field, std::string_view bucket);
// A tactic's text: 1 to 64 of [A-Za-z0-9._-] ("t128x256x64s4g8"). Only its form: whether it
// is a tactic of the op's space is the op's to say.
std::string TacticTextProblem(std::string_view field, std::string_view tactic);

// Every field set: gpu_name (printable, at most 256 bytes), sm_count, driver_version and
// tactic_space_version positive, nvrtc_version and kiln_version versions ("13.0", "0.1.0").
std::string TuningEnvironmentProblem(std::string_view field, const v1::TuningEnvironment& environment);

// op, bucket, environment, tactic, median_us (finite, > 0), timing (1 to 32 of [a-z0-9_-]),
// every candidate (a tactic; ok with a median, or failed with a reason; no tactic twice) and,
// when there are candidates, the chosen tactic among the ok ones.
std::string TuningRecordProblem(std::string_view field, const v1::TuningRecord& record);

// Fields this build does not know (a newer writer's, or a mistake), anywhere in `message`:
// "<field>: unknown field number 9 (written by a newer Kiln?)".
std::string UnknownFieldsProblem(std::string_view field, const google::protobuf::Message& message);

}  // namespace kiln::proto
