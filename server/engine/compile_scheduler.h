// CompileScheduler: the bounded worker pool for compiles. A job starts when fewer than
// max_jobs run and its memory estimate fits the budget next to the running ones (a job larger
// than the whole budget runs alone). First come, first served: the head of the queue is never
// overtaken, so a large job cannot starve.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::server {

class CompileScheduler {
 public:
  CompileScheduler(int max_jobs, int64_t memory_budget_mb);
  ~CompileScheduler();

  // Queues `run`. When the scheduler stops before it started, `abandon` is called instead
  // (on the thread that calls Stop). Returns false, calling neither, when already stopping.
  bool Submit(int64_t memory_mb, std::function<void()> run, std::function<void()> abandon);

  // Stops taking work and abandons what is queued; running jobs go on.
  void StopAccepting();
  // StopAccepting, then waits up to `grace` for running jobs.
  // Returns true when none is running any more. Workers still running are detached (NVRTC
  // cannot be interrupted); the process is expected to exit.
  bool Stop(std::chrono::milliseconds grace);

  int running() const;
  int queued() const;
  int max_jobs() const { return max_jobs_; }
  int64_t memory_budget_mb() const { return budget_mb_; }

 private:
  struct Item {
    int64_t memory_mb;
    std::function<void()> run;
    std::function<void()> abandon;
  };
  void WorkerLoop();

  const int max_jobs_;
  const int64_t budget_mb_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Item> queue_;
  int running_ = 0;
  int64_t used_mb_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace kiln::server
