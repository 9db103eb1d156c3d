// Who is asking: the client_id sent with every request and shown in the daemon's job waiters.
#pragma once

#include <string>

namespace kiln::client {

// "<process name>[<pid>]", e.g. "vllm-worker[4121]".
std::string DefaultClientId();

}  // namespace kiln::client
