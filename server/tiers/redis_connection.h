// RedisConnection: one blocking hiredis connection to the shared cluster cache, every step
// bounded by one timeout (connect, and each command's send and reply), so that a Redis that is
// down, partitioned or stalled costs a request at most that long. A connection that failed
// once is not used again: its protocol state is unknown.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/tiers/redis_url.h"

struct redisContext;

namespace kiln::server {

struct RedisReply {
  std::string error;  // "" when the command got an answer that is not a Redis error
  bool nil = false;   // a null bulk string (GET of a missing key, SET NX that did not set)
  long long integer = 0;
  std::string str;  // a string or status reply
};

class RedisConnection {
 public:
  // Connects and selects the URL's database; null with `error` set when that fails.
  static std::unique_ptr<RedisConnection> Open(const RedisUrl& url, std::chrono::milliseconds timeout,
                                               std::string* error);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // One command, its arguments binary-safe. An I/O or protocol failure breaks the connection.
  RedisReply Command(const std::vector<std::string_view>& argv);
  bool broken() const { return broken_; }
  // Its owner's mark (RemoteCache: the state it was handed out in), not used here.
  uint64_t tag = 0;

 private:
  RedisConnection(redisContext* context, std::chrono::milliseconds timeout) : context_(context), timeout_(timeout) {}
  redisContext* context_;
  std::chrono::milliseconds timeout_;
  bool broken_ = false;
};

}  // namespace kiln::server
