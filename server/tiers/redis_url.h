// The address of the shared cluster cache (kilnd --remote-cache): redis://HOST:PORT[/DB].
// Parsed once, by the flag's check at start (a bad URL stops kilnd there) and by the tier.
#pragma once

#include <string>

namespace kiln::server {

struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  // "redis://HOST:PORT/DB", as logged and shown in GetStats.
  std::string str() const;
};

// "" and `out` filled when `url` is redis://HOST[:PORT][/DB] (PORT 1 to 65535, default 6379;
// DB 0 to 1023, default 0); else what is wrong with it, in words. Credentials, TLS
// (rediss://) and Unix sockets are not supported: a daemon reaches Redis over a trusted network.
std::string ParseRedisUrl(const std::string& url, RedisUrl* out);

}  // namespace kiln::server
