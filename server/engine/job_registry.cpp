#include "server/engine/job_registry.h"

#include <unistd.h>

#include <algorithm>

namespace kiln::server {
namespace {
constexpr size_t kMaxQueuedEventsPerWatcher = 10000;
}

JobRegistry::JobRegistry(size_t max_finished) : max_finished_(max_finished) {}

bool JobRegistry::IsFinished(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED || state == v1::JOB_STATE_ABANDONED ||
         state == v1::JOB_STATE_REUSED;
}

std::string JobRegistry::Create(v1::Job job) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t seq = next_seq_++;
  // Unique across daemons sharing a cache folder: the pid tells them apart on one host.
  job.set_id("j" + std::to_string(getpid()) + "-" + std::to_string(seq));
  std::string id = job.id();
  by_id_[id] = seq;
  auto& stored = jobs_[seq] = std::move(job);
  PublishLocked(stored);
  TrimLocked();
  return id;
}

void JobRegistry::Update(const std::string& id, const std::function<void(v1::Job&)>& change) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  auto& job = jobs_[it->second];
  change(job);
  PublishLocked(job);
  TrimLocked();
}

void JobRegistry::AddWaiter(const std::string& id, const std::string& client) {
  Update(id, [&](v1::Job& job) {
    auto* w = job.add_waiters();
    w->set_client(client);
    auto now = std::chrono::system_clock::now().time_since_epoch();
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
    w->mutable_since()->set_seconds(ns / 1000000000);
    w->mutable_since()->set_nanos(int32_t(ns % 1000000000));
  });
}

std::optional<v1::Job> JobRegistry::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return jobs_.at(it->second);
}

std::vector<v1::Job> JobRegistry::List(v1::JobState state, size_t limit, bool include_log) const {
  std::vector<v1::Job> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = jobs_.rbegin(); it != jobs_.rend() && out.size() < limit; ++it) {
    if (state != v1::JOB_STATE_UNSPECIFIED && it->second.state() != state) continue;
    out.push_back(it->second);
    if (!include_log) out.back().clear_log();
  }
  return out;
}

void JobRegistry::PublishLocked(const v1::Job& job) {
  for (auto& w : watchers_) {
    std::lock_guard<std::mutex> wl(w->mu_);
    if (w->events_.size() >= kMaxQueuedEventsPerWatcher) {
      w->events_.pop_front();  // a watcher that does not read loses its oldest events
      ++w->dropped_;
    }
    w->events_.push_back(job);
    w->cv_.notify_one();
  }
}

void JobRegistry::TrimLocked() {
  size_t finished = 0;
  for (const auto& [seq, job] : jobs_) finished += IsFinished(job.state());
  for (auto it = jobs_.begin(); it != jobs_.end() && finished > max_finished_;) {
    if (IsFinished(it->second.state())) {
      by_id_.erase(it->second.id());
      it = jobs_.erase(it);
      --finished;
    } else {
      ++it;
    }
  }
}

std::shared_ptr<JobRegistry::Watcher> JobRegistry::Watch(bool include_existing) {
  auto w = std::make_shared<Watcher>();
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    w->closed_ = true;
    return w;
  }
  if (include_existing) {
    for (const auto& [seq, job] : jobs_)
      if (!IsFinished(job.state())) w->events_.push_back(job);
  }
  watchers_.push_back(w);
  return w;
}

void JobRegistry::Unwatch(const std::shared_ptr<Watcher>& watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), watcher), watchers_.end());
}

void JobRegistry::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  for (auto& w : watchers_) {
    std::lock_guard<std::mutex> wl(w->mu_);
    w->closed_ = true;
    w->cv_.notify_all();
  }
  watchers_.clear();
}

bool JobRegistry::Watcher::Next(v1::Job* job, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return closed_ || !events_.empty(); });
  if (events_.empty()) return false;
  *job = std::move(events_.front());
  events_.pop_front();
  return true;
}

bool JobRegistry::Watcher::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_ && events_.empty();
}

}  // namespace kiln::server
