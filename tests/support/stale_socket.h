// A unix socket file that nobody listens on: what a daemon killed -9 leaves behind. Clients
// must take it for "no daemon", not for a daemon to wait for.
#pragma once

#include <string>

namespace kiln::testing {

// Binds a unix stream socket at `path` and closes it without listening: the file stays and a
// connect to it is refused (ECONNREFUSED). Throws std::runtime_error when it cannot be made.
void MakeStaleSocketFile(const std::string& path);

}  // namespace kiln::testing
