// RemoteCache: the shared cluster cache of `kilnd --remote-cache redis://HOST:PORT[/DB]`, one
// Redis that every daemon of a fleet reads and writes. The last lookup tier (after the
// artifact repository) and the fleet's single flight:
//
//   kiln:v1:cubin:<cache key>  a kiln.v1.RemoteCacheValue: the BundleEntry and the cubin, one
//                              value, written after a local compile, never expiring (size Redis
//                              with maxmemory and allkeys-lru: it is a cache)
//   kiln:v1:lease:<cache key>  "<host>:<pid>:<n>" of the daemon compiling that key, SET NX PX
//                              --remote-cache-lease-ms, renewed while it compiles, deleted (by
//                              its owner only) once the value is written or the compile failed
//
// A value is served only after its entry names the request's key, URI and arch and its bytes
// have the entry's size and SHA-256 (server/tiers/bundle_blob.h); any other value is logged,
// counted and deleted, and the request compiles (and publishes a good value).
//
// Redis is never needed: every command is bounded by `timeout`; a failure marks it down (logged
// once per state change), and it is then skipped until a retry time that backs off from 1 s to
// 30 s, while the daemon serves from its own tiers and compiles. Publishing is asynchronous: a
// bounded queue drained by one thread; a full queue drops the value (counted), never the reply.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/v1/bundle.pb.h"
#include "server/jit/kernel_attributes.h"
#include "server/tiers/redis_connection.h"
#include "server/tiers/redis_url.h"

namespace spdlog {
class logger;
}

namespace kiln::server {

// kiln.v1.RemoteCacheValue.value_format of the values this build writes and reads.
inline constexpr uint32_t kRemoteValueFormat = 1;

struct RemoteCacheOptions {
  RedisUrl url;
  std::chrono::milliseconds timeout{500};  // connect, and each command
  std::chrono::milliseconds lease{30000};  // a compile lease's time to live; renewed at a third
  int queue = 64;                          // values waiting to be published, at most
  std::chrono::milliseconds poll{75};      // how often a daemon waiting on a lease looks again
  std::chrono::milliseconds backoff_min{1000}, backoff_max{30000};
  std::string owner;  // "<host>:<pid>", this daemon in leases and values
};

class RemoteCache {
 public:
  explicit RemoteCache(RemoteCacheOptions options);
  ~RemoteCache();  // publishes what is queued (each within the timeout), releases its leases

  struct Found {
    v1::BundleEntry entry;
    std::vector<KernelAttributes> kernels;
    std::shared_ptr<const std::string> cubin;  // its size and SHA-256 verified
    std::string publisher;
  };
  // The value of `key`, verified; nullopt when there is none, Redis is down, or the value was
  // refused (then logged, counted and deleted).
  std::optional<Found> Find(const std::string& key, const std::string& uri, const std::string& arch);

  enum class Lease {
    kAcquired,     // ours: renewed in the background until Publish(..., true) or ReleaseLease
    kHeld,         // another daemon is compiling the key: poll Find, then try again
    kUnavailable,  // Redis is down: compile without the fleet
  };
  Lease TryLease(const std::string& key);
  // Queues `entry` and `cubin` for writing; then, when `release_lease`, the key's lease is
  // deleted (after the value is written, so a waiter finds one or the other).
  void Publish(v1::BundleEntry entry, std::shared_ptr<const std::string> cubin, bool release_lease);
  // Deletes our lease of `key` in the background (a failed or abandoned compile).
  void ReleaseLease(const std::string& key);
  void CountLeaseWait() { lease_waits_++; }

  // "redis://HOST:PORT/DB: up" or "redis://HOST:PORT/DB: down (why); next try in 4 s".
  std::string Describe() const;
  const RedisUrl& url() const { return options_.url; }
  std::chrono::milliseconds poll() const { return options_.poll; }
  uint64_t rejected() const { return rejected_; }
  uint64_t published() const { return published_; }
  uint64_t publish_dropped() const { return publish_dropped_; }
  uint64_t lease_waits() const { return lease_waits_; }

  static std::string ValueKey(const std::string& key) { return "kiln:v1:cubin:" + key; }
  static std::string LeaseKey(const std::string& key) { return "kiln:v1:lease:" + key; }

 private:
  struct Task {
    std::string key;
    std::optional<v1::BundleEntry> entry;  // none: release the lease only
    std::shared_ptr<const std::string> cubin;
    bool release_lease = false;
  };
  // A connection, or null while Redis is down and its retry time has not come (or the connect
  // failed: then marked down).
  std::unique_ptr<RedisConnection> Connection();
  // After a command: keeps a healthy connection for reuse, marks Redis up or down.
  void Done(std::unique_ptr<RedisConnection> connection, const RedisReply& reply, const std::string& what);
  void MarkDown(const std::string& why);
  void MarkUp();
  // Deletes `key`'s value only if it still is `bytes` (a good value written since survives).
  void DeleteIfUnchanged(const std::string& key, const std::string& bytes);
  // Deletes `key`'s lease only if `token` still holds it.
  void DeleteLease(const std::string& key, const std::string& token);
  void PublishLoop();
  void RenewLoop();  // renews our leases; probes Redis while it is down
  void RenewLeases();
  void Run(Task task);

  RemoteCacheOptions options_;
  std::shared_ptr<spdlog::logger> log_;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
  bool down_ = false;
  bool contacted_ = false;    // a command was answered once
  uint64_t state_epoch_ = 0;  // counts changes between up and down (RedisConnection::tag)
  std::string down_why_;
  std::chrono::steady_clock::time_point next_try_;
  std::chrono::milliseconds backoff_;
  std::map<std::string, std::string> leases_;  // key → our token
  uint64_t lease_counter_ = 0;

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Task> queue_;
  int queued_values_ = 0;
  bool queue_full_logged_ = false;
  bool stopping_ = false;
  std::thread publisher_;
  std::thread renewer_;

  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> published_{0};
  std::atomic<uint64_t> publish_dropped_{0};
  std::atomic<uint64_t> lease_waits_{0};
};

}  // namespace kiln::server
