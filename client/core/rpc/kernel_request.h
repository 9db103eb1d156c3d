// The wire form of what a caller asks for: kiln::OpRequest / kiln::SourceRequest and a target
// arch as a GetKernelRequest, with the process's diagnostic compile control (KILN_DEBUG_COMPILE,
// client/core/rpc/debug_compile.h) applied: every request of the library is built here.
#pragma once

#include <string>

#include "client/core/rpc/debug_compile.h"
#include "kiln/kernel.h"
#include "kiln/v1/kernel.pb.h"

namespace kiln::client {

// With ProcessDebugCompile().
v1::GetKernelRequest MakeKernelRequest(const OpRequest& op, const std::string& arch);
v1::GetKernelRequest MakeKernelRequest(const SourceRequest& source, const std::string& arch);

// With the given controls instead of the environment's.
v1::GetKernelRequest MakeKernelRequest(const OpRequest& op, const std::string& arch, const DebugCompile& debug);
v1::GetKernelRequest MakeKernelRequest(const SourceRequest& source, const std::string& arch, const DebugCompile& debug);

}  // namespace kiln::client
