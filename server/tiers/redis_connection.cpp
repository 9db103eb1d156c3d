#include "server/tiers/redis_connection.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

timeval ToTimeval(std::chrono::milliseconds ms) {
  timeval tv;
  tv.tv_sec = ms.count() / 1000;
  tv.tv_usec = (ms.count() % 1000) * 1000;
  return tv;
}

// hiredis says "Resource temporarily unavailable" when a socket timeout ends a read or write.
std::string IoError(const redisContext* c, std::chrono::milliseconds timeout) {
  std::string what = c->errstr;
  if (c->err == REDIS_ERR_IO &&
      (what.find("temporarily unavailable") != std::string::npos || what.find("timed out") != std::string::npos))
    return absl::StrCat("no answer within ", timeout.count(), " ms (--remote-cache-timeout-ms)");
  if (c->err == REDIS_ERR_EOF) return "the server closed the connection";
  return what.empty() ? "I/O error" : what;
}

}  // namespace

std::unique_ptr<RedisConnection> RedisConnection::Open(const RedisUrl& url, std::chrono::milliseconds timeout,
                                                       std::string* error) {
  redisContext* c = redisConnectWithTimeout(url.host.c_str(), url.port, ToTimeval(timeout));
  if (c == nullptr) {
    *error = "out of memory for a Redis connection";
    return nullptr;
  }
  if (c->err != 0) {
    *error = absl::StrCat("cannot connect: ", IoError(c, timeout));
    redisFree(c);
    return nullptr;
  }
  if (redisSetTimeout(c, ToTimeval(timeout)) != REDIS_OK) {
    *error = absl::StrCat("cannot set the socket timeout: ", c->errstr);
    redisFree(c);
    return nullptr;
  }
  std::unique_ptr<RedisConnection> connection(new RedisConnection(c, timeout));
  if (url.db != 0) {
    RedisReply selected = connection->Command({"SELECT", std::to_string(url.db)});
    if (!selected.error.empty()) {
      *error = absl::StrCat("SELECT ", url.db, ": ", selected.error);
      return nullptr;
    }
  }
  return connection;
}

RedisConnection::~RedisConnection() { redisFree(context_); }

RedisReply RedisConnection::Command(const std::vector<std::string_view>& argv) {
  RedisReply out;
  if (broken_) {
    out.error = "the connection failed before";
    return out;
  }
  std::vector<const char*> args;
  std::vector<size_t> lengths;
  for (auto a : argv) {
    args.push_back(a.data());
    lengths.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(redisCommandArgv(context_, int(args.size()), args.data(), lengths.data()));
  if (reply == nullptr) {
    broken_ = true;
    out.error = IoError(context_, timeout_);
    return out;
  }
  switch (reply->type) {
    case REDIS_REPLY_NIL: out.nil = true; break;
    case REDIS_REPLY_INTEGER: out.integer = reply->integer; break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS: out.str.assign(reply->str, reply->len); break;
    case REDIS_REPLY_ERROR: out.error = absl::StrCat("Redis says: ", absl::string_view(reply->str, reply->len)); break;
    default: break;  // arrays: no command of ours expects one
  }
  freeReplyObject(reply);
  return out;
}

}  // namespace kiln::server
