#include "server/tiers/remote_cache.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "server/rpc/wire_forms.h"
#include "server/tiers/bundle_blob.h"

namespace kiln::server {
namespace {

// Compare-and-delete and compare-and-renew: only the holder of a lease (the writer of a value)
// may end it, so a daemon whose lease expired while it was stalled never deletes its successor's.
constexpr const char* kDeleteIfEqual =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
constexpr const char* kRenewIfEqual =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";
// Idle connections kept for reuse; beyond that they are closed.
constexpr size_t kMaxIdle = 16;

}  // namespace

RemoteCache::RemoteCache(RemoteCacheOptions options)
    : options_(std::move(options)), log_(spdlog::default_logger()), backoff_(options_.backoff_min) {
  // Connect now, so that the log says at start whether the fleet's cache is there (a failure
  // has logged itself).
  if (auto connection = Connection()) {
    RedisReply pong = connection->Command({"PING"});
    Done(std::move(connection), pong, "PING");
  }
  log_->info("remote cache {}; compile leases of {} ms, {} ms timeout, publish queue of {}", Describe(),
             options_.lease.count(), options_.timeout.count(), options_.queue);
  publisher_ = std::thread([this] { PublishLoop(); });
  renewer_ = std::thread([this] { RenewLoop(); });
}

RemoteCache::~RemoteCache() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  publisher_.join();
  renewer_.join();
  // Leases of compiles that never finished: others need not wait for them to expire.
  std::map<std::string, std::string> leases;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leases.swap(leases_);
  }
  for (const auto& [key, token] : leases) DeleteLease(key, token);
}

std::unique_ptr<RedisConnection> RemoteCache::Connection() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (down_) {
      if (now < next_try_) return nullptr;
      next_try_ = now + backoff_;  // this caller probes; the others keep skipping meanwhile
    }
    if (!idle_.empty()) {
      auto connection = std::move(idle_.back());
      idle_.pop_back();
      connection->tag = state_epoch_;
      return connection;
    }
  }
  std::string error;
  auto connection = RedisConnection::Open(options_.url, options_.timeout, &error);
  if (!connection) {
    MarkDown(error);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu_);
  connection->tag = state_epoch_;
  return connection;
}

void RemoteCache::Done(std::unique_ptr<RedisConnection> connection, const RedisReply& reply, const std::string& what) {
  {
    // A command that began before the last change of state says nothing about the state now
    // (one that succeeded just before Redis died must not undo the failure logged since).
    std::lock_guard<std::mutex> lock(mu_);
    if (connection->tag != state_epoch_) return;
  }
  if (connection->broken()) {
    MarkDown(absl::StrCat(what, ": ", reply.error));
    return;
  }
  // A Redis error reply (out of memory under noeviction, a read-only replica) is the command's
  // failure, not the server's: logged, and the server stays up.
  if (!reply.error.empty()) log_->warn("remote cache {}: {}: {}", options_.url.str(), what, reply.error);
  MarkUp();
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(connection));
}

void RemoteCache::MarkDown(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.clear();  // they reach the same server: none is trusted after a failure
  if (!down_) {
    state_epoch_++;
    backoff_ = options_.backoff_min;
    log_->warn("remote cache {}: unreachable or unusable ({}); serving from the local tiers and compiling here "
               "meanwhile; retrying with backoff from {} s to {} s",
               options_.url.str(), why, options_.backoff_min.count() / 1000.0, options_.backoff_max.count() / 1000.0);
  } else {
    backoff_ = std::min(backoff_ * 2, options_.backoff_max);
  }
  down_ = true;
  down_why_ = why;
  next_try_ = std::chrono::steady_clock::now() + backoff_;
}

void RemoteCache::MarkUp() {
  std::lock_guard<std::mutex> lock(mu_);
  contacted_ = true;
  if (!down_) return;
  state_epoch_++;
  down_ = false;
  down_why_.clear();
  backoff_ = options_.backoff_min;
  log_->info("remote cache {}: reachable again", options_.url.str());
}

std::optional<RemoteCache::Found> RemoteCache::Find(const std::string& key, const std::string& uri,
                                                    const std::string& arch) {
  auto connection = Connection();
  if (!connection) return std::nullopt;
  RedisReply got = connection->Command({"GET", ValueKey(key)});
  const bool answered = got.error.empty();
  Done(std::move(connection), got, "GET");
  if (!answered || got.nil) return std::nullopt;

  v1::RemoteCacheValue value;
  std::string problem;
  if (!value.ParseFromString(got.str)) {
    problem = absl::StrCat("its ", got.str.size(), " bytes are not a kiln.v1.RemoteCacheValue");
  } else if (value.value_format() != kRemoteValueFormat) {
    problem = absl::StrCat("its value_format is ", value.value_format(), ", this daemon reads ", kRemoteValueFormat);
  } else if (value.entry().cache_key() != key) {
    problem = absl::StrCat("its entry is of key ", value.entry().cache_key().substr(0, 16));
  } else if (std::string mismatch = BundleEntryMismatch(value.entry(), key, uri, arch); !mismatch.empty()) {
    problem = mismatch;
  } else if (std::string blob = BundleBlobProblem(value.entry(), value.cubin()); !blob.empty()) {
    problem = blob;
  }
  if (!problem.empty()) {
    rejected_++;
    log_->warn("remote cache {}: the value of key {} (published by {}): {}; not served, deleted", options_.url.str(),
               key.substr(0, 16), value.publisher().empty() ? std::string("?") : value.publisher(), problem);
    DeleteIfUnchanged(key, got.str);
    return std::nullopt;
  }
  Found found;
  found.entry = value.entry();
  for (const auto& k : value.entry().kernels()) found.kernels.push_back(FromWire(k));
  found.publisher = value.publisher();
  found.cubin = std::make_shared<const std::string>(std::move(*value.mutable_cubin()));
  return found;
}

void RemoteCache::DeleteIfUnchanged(const std::string& key, const std::string& bytes) {
  auto connection = Connection();
  if (!connection) return;
  RedisReply deleted = connection->Command({"EVAL", kDeleteIfEqual, "1", ValueKey(key), bytes});
  Done(std::move(connection), deleted, "EVAL compare-and-delete of a value");
}

void RemoteCache::DeleteLease(const std::string& key, const std::string& token) {
  auto connection = Connection();
  if (!connection) return;  // it expires by itself
  RedisReply deleted = connection->Command({"EVAL", kDeleteIfEqual, "1", LeaseKey(key), token});
  Done(std::move(connection), deleted, "EVAL compare-and-delete of a lease");
}

RemoteCache::Lease RemoteCache::TryLease(const std::string& key) {
  auto connection = Connection();
  if (!connection) return Lease::kUnavailable;
  std::string token;
  {
    std::lock_guard<std::mutex> lock(mu_);
    token = absl::StrCat(options_.owner, ":", ++lease_counter_);
  }
  RedisReply set = connection->Command(
      {"SET", LeaseKey(key), token, "NX", "PX", std::to_string(options_.lease.count())});
  const bool answered = set.error.empty();
  Done(std::move(connection), set, "SET NX of a lease");
  if (!answered) return Lease::kUnavailable;
  if (set.nil) return Lease::kHeld;
  std::lock_guard<std::mutex> lock(mu_);
  leases_[key] = token;
  return Lease::kAcquired;
}

void RemoteCache::Publish(v1::BundleEntry entry, std::shared_ptr<const std::string> cubin, bool release_lease) {
  std::string key = entry.cache_key();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (queued_values_ >= options_.queue) {
      publish_dropped_++;
      // Once per burst: the counter has the rest.
      if (!queue_full_logged_)
        log_->warn("remote cache {}: the publish queue is full ({} values; --remote-cache-queue); {} for {} (key {}) "
                   "and any more until it drains are not published (GetStats.remotePublishDropped)",
                   options_.url.str(), options_.queue, entry.uri(), entry.arch(), key.substr(0, 16));
      queue_full_logged_ = true;
      if (release_lease) queue_.push_back(Task{key, std::nullopt, nullptr, true});
    } else {
      queue_full_logged_ = false;
      queued_values_++;
      queue_.push_back(Task{key, std::move(entry), std::move(cubin), release_lease});
    }
  }
  queue_cv_.notify_all();
}

void RemoteCache::ReleaseLease(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back(Task{key, std::nullopt, nullptr, true});
  }
  queue_cv_.notify_all();
}

void RemoteCache::PublishLoop() {
  std::unique_lock<std::mutex> lock(queue_mu_);
  for (;;) {
    queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued was written
    Task task = std::move(queue_.front());
    queue_.pop_front();
    if (task.entry) queued_values_--;
    lock.unlock();
    Run(std::move(task));
    lock.lock();
  }
}

void RemoteCache::Run(Task task) {
  std::string token;
  if (task.release_lease) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = leases_.find(task.key); it != leases_.end()) {
      token = it->second;
      leases_.erase(it);  // no more renewals
    }
  }
  if (task.entry) {
    v1::RemoteCacheValue value;
    value.set_value_format(kRemoteValueFormat);
    *value.mutable_entry() = std::move(*task.entry);
    value.set_publisher(options_.owner);
    value.set_cubin(*task.cubin);
    const std::string bytes = value.SerializeAsString();
    auto connection = Connection();
    if (!connection) {
      publish_dropped_++;
    } else {
      RedisReply set = connection->Command({"SET", ValueKey(task.key), bytes});
      const bool written = set.error.empty();
      Done(std::move(connection), set, "SET of a value");
      if (written) {
        published_++;
        log_->debug("remote cache {}: published {} for {} (key {}, {} bytes)", options_.url.str(), value.entry().uri(),
                    value.entry().arch(), task.key.substr(0, 16), bytes.size());
      } else {
        publish_dropped_++;
      }
    }
  }
  if (!token.empty()) DeleteLease(task.key, token);
}

void RemoteCache::RenewLoop() {
  const auto renew_every = std::max(options_.lease / 3, std::chrono::milliseconds(50));
  // While Redis is down this thread also probes it, so that it comes back (and says so) without
  // waiting for a request to miss every local tier.
  const auto tick = std::min(renew_every, options_.backoff_min);
  auto next_renewal = std::chrono::steady_clock::now() + renew_every;
  std::unique_lock<std::mutex> lock(queue_mu_);
  while (!queue_cv_.wait_for(lock, tick, [&] { return stopping_; })) {
    lock.unlock();
    bool down = false;
    {
      std::lock_guard<std::mutex> held(mu_);
      down = down_;
    }
    if (down) {
      if (auto connection = Connection()) {
        RedisReply pong = connection->Command({"PING"});
        Done(std::move(connection), pong, "PING");
      }
    }
    if (std::chrono::steady_clock::now() >= next_renewal) {
      next_renewal = std::chrono::steady_clock::now() + renew_every;
      RenewLeases();
    }
    lock.lock();
  }
}

void RemoteCache::RenewLeases() {
  std::map<std::string, std::string> leases;
  {
    std::lock_guard<std::mutex> held(mu_);
    leases = leases_;
  }
  for (const auto& [key, token] : leases) {
    auto connection = Connection();
    if (!connection) return;  // down: the leases expire, and others compile
    RedisReply renewed = connection->Command(
        {"EVAL", kRenewIfEqual, "1", LeaseKey(key), token, std::to_string(options_.lease.count())});
    const bool answered = renewed.error.empty();
    Done(std::move(connection), renewed, "EVAL renewal of a lease");
    if (answered && renewed.integer == 0) {
      std::lock_guard<std::mutex> held(mu_);
      if (auto it = leases_.find(key); it != leases_.end() && it->second == token) {
        leases_.erase(it);
        log_->warn("remote cache {}: the compile lease of key {} expired before it was renewed (Redis was slow or "
                   "unreachable for {} ms); another daemon may compile it too",
                   options_.url.str(), key.substr(0, 16), options_.lease.count());
      }
    }
  }
}

std::string RemoteCache::Describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (down_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_try_ -
                                                                            std::chrono::steady_clock::now());
    return absl::StrCat(options_.url.str(), ": down (", down_why_, "); next try in ",
                        std::max<int64_t>(0, left.count()) / 1000.0, " s");
  }
  return absl::StrCat(options_.url.str(), contacted_ ? ": up" : ": not contacted yet");
}

}  // namespace kiln::server
