#include "tests/support/redis_server.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace kiln::testing {
namespace {

constexpr const char* kRedisServer = "/usr/bin/redis-server";

// A hiredis context that frees itself; throws when the server does not answer.
struct Context {
  explicit Context(int port) {
    c = redisConnectWithTimeout("127.0.0.1", port, timeval{2, 0});
    if (c == nullptr || c->err != 0) {
      std::string why = c ? c->errstr : "out of memory";
      if (c) redisFree(c);
      throw std::runtime_error("redis on port " + std::to_string(port) + ": " + why);
    }
    redisSetTimeout(c, timeval{2, 0});
  }
  ~Context() { redisFree(c); }
  redisReply* Command(const std::vector<std::string>& argv) {
    std::vector<const char*> args;
    std::vector<size_t> lengths;
    for (const auto& a : argv) args.push_back(a.data()), lengths.push_back(a.size());
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(args.size()), args.data(), lengths.data()));
    if (r == nullptr) throw std::runtime_error(std::string("redis: ") + c->errstr);
    return r;
  }
  redisContext* c;
};

}  // namespace

RedisServer::RedisServer() {
  if (access(kRedisServer, X_OK) != 0) {
    std::printf("SKIPPED: %s is not installed (apt-get install redis-server)\n", kRedisServer);
    std::exit(KILN_TEST_SKIP_CODE);
  }
  port_ = FreeLoopbackPort();
  Start();
}

RedisServer::~RedisServer() {
  if (process_) Stop();
}

std::string RedisServer::url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

void RedisServer::Stop() {
  if (!process_) return;
  process_->Signal(SIGKILL);
  process_->Wait(std::chrono::seconds(10));
}

void RedisServer::Pause() { process_->Signal(SIGSTOP); }
void RedisServer::Resume() { process_->Signal(SIGCONT); }

void RedisServer::Start() {
  SubprocessOptions p;
  p.argv = {kRedisServer, "--port",           std::to_string(port_),
            "--bind",     "127.0.0.1",        "--save",
            "",           "--appendonly",     "no",
            "--dir",      dir_.path(),        "--daemonize",
            "no",         "--protected-mode", "no"};
  process_ = std::make_unique<Subprocess>(p);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    try {
      Context ctx(port_);
      redisReply* r = ctx.Command({"PING"});
      freeReplyObject(r);
      return;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  throw std::runtime_error("redis-server did not answer on port " + std::to_string(port_) + ": " + Log());
}

std::optional<std::string> RedisServer::Get(const std::string& key) {
  Context ctx(port_);
  redisReply* r = ctx.Command({"GET", key});
  std::optional<std::string> out;
  if (r->type == REDIS_REPLY_STRING) out = std::string(r->str, r->len);
  freeReplyObject(r);
  return out;
}

void RedisServer::Set(const std::string& key, const std::string& value) {
  Context ctx(port_);
  freeReplyObject(ctx.Command({"SET", key, value}));
}

std::vector<std::string> RedisServer::Keys(const std::string& pattern) {
  Context ctx(port_);
  redisReply* r = ctx.Command({"KEYS", pattern});
  std::vector<std::string> out;
  if (r->type == REDIS_REPLY_ARRAY)
    for (size_t i = 0; i < r->elements; ++i) out.emplace_back(r->element[i]->str, r->element[i]->len);
  freeReplyObject(r);
  return out;
}

}  // namespace kiln::testing
