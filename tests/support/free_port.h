// A TCP port nothing listens on, for tests that start servers on loopback (kilnd --listen,
// redis-server, --metrics-listen).
#pragma once

namespace kiln::testing {

// An unused TCP port on 127.0.0.1 (bound and released: a test takes it soon after). Throws
// std::runtime_error when none can be bound.
int FreeLoopbackPort();

}  // namespace kiln::testing
