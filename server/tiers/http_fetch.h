// HttpGet: one HTTP(S) GET with libcurl (Debian's libcurl4-openssl-dev), for the artifact
// repository. Bounded in every way a server can misbehave: connect timeout, a whole-transfer
// timeout, a stall timeout (no byte for that long), a size cap; redirects followed at most 5
// times, http and https only. HttpGetWithRetries retries what may pass (timeouts, refused or
// reset connections, truncated bodies, 5xx) with exponential backoff, never a 4xx.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace kiln::server {

struct HttpOptions {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds timeout{30000};        // the whole transfer
  std::chrono::milliseconds stall_timeout{10000};  // no byte received for this long
  uint64_t max_bytes = uint64_t(1) << 30;
};

struct HttpResult {
  bool ok = false;
  long status = 0;         // the HTTP status, 0 when none arrived
  std::string body;        // when ok
  std::string error;       // when !ok: what went wrong, in words
  bool transient = false;  // when !ok: another try may succeed
  int attempts = 0;
};

HttpResult HttpGet(const std::string& url, const HttpOptions& options);

// Up to 1 + retries attempts, waiting backoff, 2 * backoff, ... between them (stopped early
// when `stop` says so).
HttpResult HttpGetWithRetries(const std::string& url, const HttpOptions& options, int retries,
                              std::chrono::milliseconds backoff, const std::function<bool()>& stop = nullptr);

}  // namespace kiln::server
