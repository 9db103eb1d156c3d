#include "server/engine/compile_scheduler.h"

#include <algorithm>

namespace kiln::server {

CompileScheduler::CompileScheduler(int max_jobs, int64_t memory_budget_mb)
    : max_jobs_(std::max(1, max_jobs)), budget_mb_(std::max<int64_t>(1, memory_budget_mb)) {
  for (int i = 0; i < max_jobs_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

CompileScheduler::~CompileScheduler() {
  Stop(std::chrono::milliseconds(0));
  for (auto& t : workers_)
    if (t.joinable()) t.detach();
}

bool CompileScheduler::Submit(int64_t memory_mb, std::function<void()> run, std::function<void()> abandon) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return false;
  queue_.push_back(Item{std::max<int64_t>(1, memory_mb), std::move(run), std::move(abandon)});
  cv_.notify_all();
  return true;
}

void CompileScheduler::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] {
      if (stopping_) return true;
      if (queue_.empty()) return false;
      const Item& head = queue_.front();
      return running_ == 0 || used_mb_ + head.memory_mb <= budget_mb_;
    });
    if (stopping_) return;
    Item item = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    used_mb_ += item.memory_mb;
    lock.unlock();
    item.run();
    lock.lock();
    --running_;
    used_mb_ -= item.memory_mb;
    cv_.notify_all();
    idle_cv_.notify_all();
  }
}

void CompileScheduler::StopAccepting() {
  std::deque<Item> abandoned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    abandoned.swap(queue_);
    cv_.notify_all();
  }
  for (auto& item : abandoned)
    if (item.abandon) item.abandon();
}

bool CompileScheduler::Stop(std::chrono::milliseconds grace) {
  StopAccepting();
  bool idle;
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle = idle_cv_.wait_for(lock, grace, [&] { return running_ == 0; });
  }
  for (auto& t : workers_) {
    if (!t.joinable()) continue;
    if (idle) t.join();
    else t.detach();
  }
  return idle;
}

int CompileScheduler::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int CompileScheduler::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int(queue_.size());
}

}  // namespace kiln::server
