// What `kiln get` and `kiln compile` share: the target arch (--arch, else the local GPU's),
// one GetKernel through the client library's fetch path (blob file or bytes, SHA-256
// checked), --out, and the report (human or --json).
#pragma once

#include "client/cli/command.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::cli {

// The options both commands take.
std::vector<OptionSpec> KernelFetchOptions();

// Sets the arch and debug controls of `request` from the options, fetches, writes --out,
// prints. Returns the exit code.
int FetchAndReport(Invocation& invocation, v1::GetKernelRequest request);

}  // namespace kiln::cli
