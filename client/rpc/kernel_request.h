// The wire form of what a caller asks for: kiln::OpRequest / kiln::SourceRequest and a target
// arch as a GetKernelRequest.
#pragma once

#include <string>

#include "kiln/kernel.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::client {

v1::GetKernelRequest MakeKernelRequest(const OpRequest& op, const std::string& arch);
v1::GetKernelRequest MakeKernelRequest(const SourceRequest& source, const std::string& arch);

}  // namespace kiln::client
