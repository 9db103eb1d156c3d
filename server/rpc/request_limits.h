// The length checks of every request the daemon serves (proto/input_limits.h has the limits
// and why): each returns "" when every string of the request is within its limit, else the
// first one that is not, naming its field and the limit. The services run them first, before
// any check that could quote a field, and answer INVALID_ARGUMENT with the message.
#pragma once

#include <string>

#include "kiln/v1/cache.pb.h"
#include "kiln/v1/job.pb.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::server {

std::string RequestLengthProblem(const v1::GetKernelRequest& request);
std::string RequestLengthProblem(const v1::ListOpsRequest& request);
std::string RequestLengthProblem(const v1::ListEntriesRequest& request);
std::string RequestLengthProblem(const v1::GetEntryRequest& request);
std::string RequestLengthProblem(const v1::EvictEntriesRequest& request);
std::string RequestLengthProblem(const v1::GetJobRequest& request);
// TuningService's requests are checked by proto/tuning_checks.h, which bounds every field.

}  // namespace kiln::server
