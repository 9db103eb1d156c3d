// The public description of a fetched module (kiln::ModuleInfo) from the daemon's reply.
#pragma once

#include "kiln/kernel.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::client {

ModuleInfo ToModuleInfo(const v1::GetKernelResponse& reply);

}  // namespace kiln::client
