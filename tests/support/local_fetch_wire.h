// The same-node fetch protocol (proto/local_fetch.h) spoken raw, for tests that need what a
// client library would hide: frames with a wrong length, a connection held open, the magic sent
// apart from the first request. Shared by tests/server/local_fetch_protocol_test.cpp and
// tests/server/metrics_endpoint_test.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/v1/kernel.pb.h"

namespace kiln::testing {

// A non-blocking connection to the unix socket at `path`, or -1.
int ConnectUnixSocket(const std::string& path);

// What came back for one frame: the status code and body, or `closed` when the daemon closed
// the connection instead of answering.
struct LocalFetchReply {
  uint32_t code = 0;
  std::string body;
  bool closed = false;
};

// Sends `body` framed with `claimed_length` (its size for a well-formed frame) on `fd` (the
// magic already sent) and reads the reply, within `within`.
LocalFetchReply ExchangeLocalFrame(int fd, std::string_view body, uint32_t claimed_length,
                                   std::chrono::milliseconds within = std::chrono::seconds(60));

// One GetKernel on a new connection: the magic, the request, the reply; the connection closed.
LocalFetchReply LocalFetchOnce(const std::string& socket, const v1::GetKernelRequest& request);

}  // namespace kiln::testing
